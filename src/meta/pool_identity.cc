#include "meta/pool_identity.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "alloc/pool_device.h"
#include "util/log.h"

namespace maru {
namespace {

struct GivenDevice {
  std::string path;
  Superblock sb;
};

// Device index -> what to say about its reset.
using Resets = std::map<uint32_t, std::string>;

Result<std::vector<GivenDevice>> ReadGivenDevices(const std::vector<std::string> &paths) {
  std::vector<GivenDevice> given;
  for (const std::string &path : paths) {
    Result<Superblock> sb = ReadSuperblock(path);
    if (!sb.ok()) return sb.status();
    for (const GivenDevice &other : given)
      if (other.sb.device_uuid == sb->device_uuid)
        return Status::Error(EINVAL, path + " and " + other.path + " are the same device");
    // One unit for the pool: clients size and align every chunk by it.
    if (!given.empty() && given[0].sb.unit != sb->unit)
      return Status::Error(EINVAL, path + " has allocation unit " + std::to_string(sb->unit) +
                                       " but " + given[0].path + " has " +
                                       std::to_string(given[0].sb.unit) +
                                       "; format the pool's devices with one unit");
    given.push_back(GivenDevice{path, *sb});
  }
  return given;
}

// The given device a record names: by uuid, else (formatted anew) by path;
// given.size() if none.
size_t MatchRecord(const std::vector<GivenDevice> &given, const std::vector<bool> &placed,
                   const schema::DeviceIdentity &rec) {
  size_t match = given.size();
  for (size_t i = 0; i < given.size(); ++i)
    if (UuidBytes(given[i].sb.device_uuid) == rec.device_uuid()) match = i;
  for (size_t i = 0; match == given.size() && i < given.size(); ++i)
    if (!placed[i] && given[i].path == rec.path()) match = i;
  return match;
}

void Describe(const GivenDevice &dev, schema::DeviceIdentity *rec) {
  rec->set_device_uuid(UuidBytes(dev.sb.device_uuid));
  rec->set_epoch(dev.sb.epoch);
  rec->set_path(dev.path);
}

// Places every device the database knows on a given one, noting resets.
Status PlaceKnownDevices(const std::vector<GivenDevice> &given, std::vector<bool> *placed,
                         schema::PoolIdentity *identity, Resets *resets, SpaceManager *space) {
  for (schema::DeviceIdentity &rec : *identity->mutable_devices()) {
    const size_t match = MatchRecord(given, *placed, rec);
    if (match == given.size())
      return Status::Error(ENODEV, "pool device " + rec.path() + " (index " +
                                       std::to_string(rec.index()) +
                                       ") holds chunks in this database but was not given; pass "
                                       "--pool " +
                                       rec.path());
    const GivenDevice &dev = given[match];
    (*placed)[match] = true;
    if (UuidBytes(dev.sb.device_uuid) != rec.device_uuid() || dev.sb.epoch != rec.epoch()) {
      char what[512];
      snprintf(what, sizeof(what), "pool device %s was reset (epoch %016lx -> %016lx)",
               dev.path.c_str(), rec.epoch(), dev.sb.epoch);
      (*resets)[rec.index()] = what;
    }
    Describe(dev, &rec);
    space->AddDevice(rec.index(), dev.path, dev.sb);
  }
  return Status::Ok();
}

// Gives each device new to the pool the next free index.
void AddNewDevices(const std::vector<GivenDevice> &given, const std::vector<bool> &placed,
                   schema::PoolIdentity *identity, SpaceManager *space) {
  uint32_t next_index = 0;
  for (const auto &rec : identity->devices()) next_index = std::max(next_index, rec.index() + 1);
  for (size_t i = 0; i < given.size(); ++i) {
    if (placed[i]) continue;
    schema::DeviceIdentity *rec = identity->add_devices();
    rec->set_index(next_index++);
    Describe(given[i], rec);
    space->AddDevice(rec->index(), given[i].path, given[i].sb);
  }
}

bool OnReset(const Resets &resets,
             const google::protobuf::RepeatedPtrField<schema::Extent> &extents) {
  for (const auto &e : extents)
    if (resets.count(e.device())) return true;
  return false;
}

// Drops the chunks (current or being written) on reset devices; returns
// how many went, by device index.
std::map<uint32_t, size_t> DropResetInodes(const Resets &resets, MetaDb::Contents *contents,
                                           MetaDb::Batch *batch) {
  std::map<uint32_t, size_t> dropped;
  Records<schema::Inode> kept;
  schema::Inode r;
  for (size_t i = 0; i < contents->inodes.size(); ++i) {
    // A corrupt record is kept, for the load to refuse it.
    if (contents->inodes.Parse(i, &r) &&
        (OnReset(resets, r.current().extents()) || OnReset(resets, r.pending().extents()))) {
      batch->DeleteInode(r.ino());
      const auto &any =
          r.current().extents_size() ? r.current().extents(0) : r.pending().extents(0);
      ++dropped[any.device()];
    } else {
      kept.Add(contents->inodes.bytes(i));
    }
  }
  contents->inodes = std::move(kept);
  return dropped;
}

void DropResetRetired(const Resets &resets, MetaDb::Contents *contents, MetaDb::Batch *batch) {
  std::vector<schema::Retired> kept;
  for (schema::Retired &r : contents->retired) {
    if (OnReset(resets, r.extents()))
      batch->DeleteRetired(r.gen());
    else
      kept.push_back(std::move(r));
  }
  contents->retired = std::move(kept);
}

void DropResetChunks(const Resets &resets, MetaDb::Contents *contents, MetaDb::Batch *batch) {
  std::map<uint32_t, size_t> dropped = DropResetInodes(resets, contents, batch);
  DropResetRetired(resets, contents, batch);
  for (const auto &[index, what] : resets)
    LOG_WARN("%s: dropped the metadata of its %zu chunks; directories are kept", what.c_str(),
             dropped[index]);
}

}  // namespace

std::string UuidBytes(const Uuid &u) {
  return std::string(u.begin(), u.end());
}

Result<std::string> ReconcilePoolIdentity(const std::vector<std::string> &paths,
                                          MetaDb::Contents *contents, MetaDb::Batch *batch,
                                          SpaceManager *space) {
  Result<std::vector<GivenDevice>> given = ReadGivenDevices(paths);
  if (!given.ok()) return given.status();
  schema::PoolIdentity identity;
  if (contents->identity) identity = *contents->identity;
  std::vector<bool> placed(given->size(), false);
  Resets resets;
  MARU_RETURN_IF_ERROR(PlaceKnownDevices(*given, &placed, &identity, &resets, space));
  AddNewDevices(*given, placed, &identity, space);
  if (identity.pool_uuid().empty()) identity.set_pool_uuid(UuidBytes((*given)[0].sb.pool_uuid));
  batch->PutIdentity(identity);
  if (!resets.empty()) DropResetChunks(resets, contents, batch);
  return identity.pool_uuid();
}

}  // namespace maru
