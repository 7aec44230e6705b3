#include "meta/meta_engine.h"

#include <sys/random.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "alloc/pool_device.h"
#include "grant_mac.h"
#include "util/log.h"
#include "util/path.h"
#include "util/units.h"

namespace maru {
namespace {

constexpr uint64_t kCounterStep = 1 << 16;
constexpr uint32_t kReaddirDefault = 1024;
constexpr uint32_t kReaddirMax = 16384;

uint64_t RandomSessionId() {
  uint64_t id = 0;
  while (id == 0) {
    if (getrandom(&id, sizeof(id), 0) != sizeof(id)) id = static_cast<uint64_t>(MonotonicNs());
  }
  return id;
}

std::string UuidBytes(const Uuid &u) {
  return std::string(u.begin(), u.end());
}

}  // namespace

// The changes of one operation: inodes touched are written once at commit.
class MetaEngine::Txn {
 public:
  explicit Txn(MetaEngine *engine) : engine_(engine) {}
  void Dirty(const Inode *inode) { dirty_.insert(inode->ino); }
  void Deleted(uint64_t ino) {
    dirty_.erase(ino);
    batch.DeleteInode(ino);
  }
  Status Commit() {
    for (uint64_t ino : dirty_)
      if (const Inode *inode = engine_->tree_.Find(ino)) batch.PutInode(ToRecord(*inode));
    dirty_.clear();
    if (batch.empty()) return Status::Ok();
    Status s = engine_->db_->Write(batch);
    if (!s.ok()) {
      // Memory already holds the change; carrying on would let the two
      // disagree. Stop, and let the restart load what was written.
      LOG_ERROR("metadata write failed, stopping: %s", s.ToString().c_str());
      std::_Exit(EXIT_FAILURE);
    }
    return s;
  }
  MetaDb::Batch batch;

 private:
  MetaEngine *engine_;
  std::set<uint64_t> dirty_;
};

MetaEngine::MetaEngine(const EngineOptions &options)
    : options_(options), grant_key_(NewGrantKey()) {}
MetaEngine::~MetaEngine() = default;

Result<std::unique_ptr<MetaEngine>> MetaEngine::Open(const EngineOptions &options) {
  if (options.pool_paths.empty()) return Status::Error(EINVAL, "no pool device given (--pool)");
  if (options.low_watermark > options.high_watermark || options.high_watermark > 1.0 ||
      options.low_watermark <= 0)
    return Status::Error(EINVAL, "watermarks must satisfy 0 < low <= high <= 1");
  std::unique_ptr<MetaEngine> engine(new MetaEngine(options));
  Result<std::unique_ptr<EvictionPolicy>> policy = MakeEvictionPolicy(options.eviction);
  if (!policy.ok()) return policy.status();
  engine->eviction_ = std::move(*policy);
  MARU_RETURN_IF_ERROR(engine->Load());
  return engine;
}

// --- Start: pool identity, inodes, space --------------------------------------

Status MetaEngine::CheckPoolIdentity(MetaDb::Contents *contents, MetaDb::Batch *batch) {
  std::vector<std::pair<std::string, Superblock>> found;
  for (const std::string &path : options_.pool_paths) {
    Result<Superblock> sb = ReadSuperblock(path);
    if (!sb.ok()) return sb.status();
    for (const auto &[other, osb] : found)
      if (osb.device_uuid == sb->device_uuid)
        return Status::Error(EINVAL, path + " and " + other + " are the same device");
    // One unit for the pool: clients size and align every chunk by it.
    if (!found.empty() && found[0].second.unit != sb->unit)
      return Status::Error(EINVAL, path + " has allocation unit " + std::to_string(sb->unit) +
                                       " but " + found[0].first + " has " +
                                       std::to_string(found[0].second.unit) +
                                       "; format the pool's devices with one unit");
    found.emplace_back(path, *sb);
  }

  schema::PoolIdentity identity;
  if (contents->identity) identity = *contents->identity;
  std::map<uint32_t, std::string> reset;  // device index -> what to say about it
  std::vector<bool> placed(found.size(), false);
  for (schema::DeviceIdentity &rec : *identity.mutable_devices()) {
    size_t match = found.size();
    for (size_t i = 0; i < found.size(); ++i) {
      if (UuidBytes(found[i].second.device_uuid) == rec.device_uuid()) match = i;
    }
    for (size_t i = 0; match == found.size() && i < found.size(); ++i)
      if (!placed[i] && found[i].first == rec.path()) match = i;
    if (match == found.size())
      return Status::Error(ENODEV, "pool device " + rec.path() + " (index " +
                                       std::to_string(rec.index()) +
                                       ") holds chunks in this database but was not given; pass "
                                       "--pool " +
                                       rec.path());
    const Superblock &sb = found[match].second;
    placed[match] = true;
    if (UuidBytes(sb.device_uuid) != rec.device_uuid() || sb.epoch != rec.epoch()) {
      char what[512];
      snprintf(what, sizeof(what), "pool device %s was reset (epoch %016lx -> %016lx)",
               found[match].first.c_str(), rec.epoch(), sb.epoch);
      reset[rec.index()] = what;
    }
    rec.set_device_uuid(UuidBytes(sb.device_uuid));
    rec.set_epoch(sb.epoch);
    rec.set_path(found[match].first);
    space_.AddDevice(rec.index(), found[match].first, sb);
  }
  uint32_t next_index = 0;
  for (const auto &rec : identity.devices()) next_index = std::max(next_index, rec.index() + 1);
  for (size_t i = 0; i < found.size(); ++i) {
    if (placed[i]) continue;
    schema::DeviceIdentity *rec = identity.add_devices();
    rec->set_index(next_index++);
    rec->set_device_uuid(UuidBytes(found[i].second.device_uuid));
    rec->set_epoch(found[i].second.epoch);
    rec->set_path(found[i].first);
    space_.AddDevice(rec->index(), found[i].first, found[i].second);
  }
  if (identity.pool_uuid().empty()) identity.set_pool_uuid(UuidBytes(found[0].second.pool_uuid));
  pool_uuid_ = identity.pool_uuid();
  batch->PutIdentity(identity);

  if (reset.empty()) return Status::Ok();
  auto on_reset = [&](const google::protobuf::RepeatedPtrField<schema::Extent> &extents) {
    for (const auto &e : extents)
      if (reset.count(e.device())) return true;
    return false;
  };
  std::map<uint32_t, size_t> dropped;
  std::vector<schema::Inode> kept;
  for (schema::Inode &r : contents->inodes) {
    if (on_reset(r.current().extents()) || on_reset(r.pending().extents())) {
      batch->DeleteInode(r.ino());
      const auto &any =
          r.current().extents_size() ? r.current().extents(0) : r.pending().extents(0);
      ++dropped[any.device()];
    } else {
      kept.push_back(std::move(r));
    }
  }
  contents->inodes = std::move(kept);
  std::vector<schema::Retired> retired;
  for (schema::Retired &r : contents->retired) {
    if (on_reset(r.extents()))
      batch->DeleteRetired(r.gen());
    else
      retired.push_back(std::move(r));
  }
  contents->retired = std::move(retired);
  for (const auto &[index, what] : reset)
    LOG_WARN("%s: dropped the metadata of its %zu chunks; directories are kept", what.c_str(),
             dropped[index]);
  return Status::Ok();
}

void MetaEngine::RestoreInodes(MetaDb::Contents &contents, MetaDb::Batch *batch) {
  const int64_t now = RealtimeNs();
  uint64_t max_ino = kRootIno, max_gen = 0;
  for (const schema::Inode &r : contents.inodes) {
    auto inode = std::make_unique<Inode>(FromRecord(r));
    max_ino = std::max(max_ino, inode->ino);
    if (inode->current) max_gen = std::max(max_gen, inode->current->gen);
    if (inode->pending) max_gen = std::max(max_gen, inode->pending->gen);
    tree_.Adopt(std::move(inode));
  }
  for (const schema::Retired &r : contents.retired) max_gen = std::max(max_gen, r.gen());
  if (!tree_.root()) {
    auto root = std::make_unique<Inode>();
    root->ino = kRootIno;
    root->mode = S_IFDIR | options_.root_mode;
    root->atime_ns = root->mtime_ns = root->ctime_ns = now;
    batch->PutInode(ToRecord(*root));
    tree_.Adopt(std::move(root));
  }
  next_ino_ = std::max(max_ino + 1, contents.counters.ino_limit());
  next_gen_ = std::max(max_gen + 1, contents.counters.gen_limit());
  ino_limit_ = gen_limit_ = 0;  // the first allocation writes new limits

  std::vector<Inode *> orphans = tree_.LinkAll();
  if (!orphans.empty()) {
    Inode *root = tree_.root();
    Inode *lost = tree_.Child(*root, "lost+found");
    if (!lost || !lost->is_dir()) {
      auto dir = std::make_unique<Inode>();
      dir->ino = next_ino_++;
      dir->mode = S_IFDIR | 0700;
      dir->atime_ns = dir->mtime_ns = dir->ctime_ns = now;
      lost = tree_.Adopt(std::move(dir));
      tree_.Link(root, lost, "lost+found");
      batch->PutInode(ToRecord(*lost));
    }
    for (Inode *inode : orphans) {
      std::string name = "#" + std::to_string(inode->ino);
      tree_.Link(lost, inode, name);
      batch->PutInode(ToRecord(*inode));
    }
    LOG_WARN("%zu inodes had no directory; moved them to /lost+found", orphans.size());
  }

  tree_.ForEach([&](const Inode &cinode) {
    Inode &inode = const_cast<Inode &>(cinode);
    for (std::optional<Version> *v : {&inode.current, &inode.pending}) {
      if (!*v) continue;
      Status s = space_.MarkUsed((*v)->extents);
      if (!s.ok())
        LOG_ERROR("%s (generation %lu): %s; run maructl fsck", tree_.PathOf(inode).c_str(),
                  (*v)->gen, s.ToString().c_str());
    }
    if (inode.parent_chunk) extensions_[inode.parent_chunk].insert(inode.ino);
    if (inode.current) eviction_->OnInsert(inode.ino, inode.parent_chunk);
    if (inode.pinned) ++pins_;
    if (inode.pending) {
      Session *s = OrphanedSession(inode.pending->writer_session, inode.pending->writer_uid);
      s->reservations.insert(inode.ino);
      space_.Ref(inode.pending->gen);
      reserved_bytes_ += TotalLength(inode.pending->extents);
    }
  });
  for (const schema::Retired &r : contents.retired) {
    ExtentList extents = FromRecordExtents(r.extents());
    Status s = space_.MarkUsed(extents);
    if (!s.ok()) LOG_ERROR("retired generation %lu: %s", r.gen(), s.ToString().c_str());
    space_.RestoreRetired(r.gen(), extents);
    if (r.writer_session()) {
      OrphanedSession(r.writer_session(), r.writer_uid())->orphan_gens.insert(r.gen());
      space_.Ref(r.gen());
    }
  }
}

// A session known only from what the database says it was writing; it
// waits for its client to come back (resume) until it times out.
Session *MetaEngine::OrphanedSession(uint64_t id, uint32_t uid) {
  if (Session *s = sessions_.Find(id)) return s;
  Session *s = sessions_.Create(id);
  s->orphaned = true;
  s->uid = uid;
  s->client = "(from before restart)";
  s->since_ns = RealtimeNs();
  s->last_seen_ns = MonotonicNs();
  return s;
}

Status MetaEngine::Load() {
  Result<std::unique_ptr<MetaDb>> db = MetaDb::Open(options_.db_dir, options_.sync_writes);
  if (!db.ok()) return db.status();
  db_ = std::move(*db);
  Result<MetaDb::Contents> contents = db_->Load();
  if (!contents.ok()) return contents.status();
  started_ns_ = MonotonicNs();
  Txn txn(this);
  MARU_RETURN_IF_ERROR(CheckPoolIdentity(&*contents, &txn.batch));
  RestoreInodes(*contents, &txn.batch);
  int64_t grace_ms = options_.grace_ms >= 0 ? options_.grace_ms : options_.session_timeout_ms;
  if (!contents->inodes.empty() || !contents->retired.empty())
    space_.SetGraceUntil(started_ns_ + grace_ms * 1000000);
  // Reserve counters now so that numbers are never handed out twice.
  NextIno(txn);
  NextGen(txn);
  MARU_RETURN_IF_ERROR(txn.Commit());
  LOG_INFO("metadata loaded: %zu inodes, %s of %s free, %zu unfinished writes, %zu retired",
           tree_.size(), FormatSize(space_.free_bytes()).c_str(),
           FormatSize(space_.capacity()).c_str(), static_cast<size_t>(sessions_.size()),
           space_.retired().size());
  return Status::Ok();
}

uint64_t MetaEngine::NextIno(Txn &txn) {
  if (next_ino_ >= ino_limit_ || ino_limit_ == 0) {
    ino_limit_ = next_ino_ + kCounterStep;
    schema::Counters c;
    c.set_ino_limit(ino_limit_);
    c.set_gen_limit(std::max(gen_limit_, next_gen_));
    txn.batch.PutCounters(c);
  }
  return next_ino_++;
}

uint64_t MetaEngine::NextGen(Txn &txn) {
  if (next_gen_ >= gen_limit_ || gen_limit_ == 0) {
    gen_limit_ = next_gen_ + kCounterStep;
    schema::Counters c;
    c.set_ino_limit(std::max(ino_limit_, next_ino_));
    c.set_gen_limit(gen_limit_);
    txn.batch.PutCounters(c);
  }
  return next_gen_++;
}

// --- Helpers ------------------------------------------------------------------

Session *MetaEngine::LiveSession(uint64_t id) {
  Session *s = sessions_.Find(id);
  if (!s || s->orphaned) return nullptr;
  s->last_seen_ns = MonotonicNs();
  return s;
}

void MetaEngine::FillAttr(const Inode &inode, rpc::Attr *a) const {
  a->set_ino(inode.ino);
  a->set_parent(inode.parent ? inode.parent : inode.ino);
  a->set_mode(inode.mode);
  a->set_uid(inode.uid);
  a->set_gid(inode.gid);
  a->set_atime_ns(inode.atime_ns);
  a->set_mtime_ns(inode.mtime_ns);
  a->set_ctime_ns(inode.ctime_ns);
  a->set_hits(inode.hits);
  a->set_pinned(inode.pinned);
  a->set_pin_expiry_ns(inode.pin_expiry_ns);
  a->set_parent_chunk(inode.parent_chunk);
  if (inode.is_dir()) {
    a->set_state(rpc::DIRECTORY);
    a->set_nlink(2 + inode.subdirs);
    a->set_size(4096);
    return;
  }
  a->set_nlink(1);
  const Version *v = inode.current ? &*inode.current : inode.pending ? &*inode.pending : nullptr;
  a->set_state(inode.current ? rpc::SEALED : rpc::WRITING);
  if (!v) return;
  a->set_gen(v->gen);
  // Until sealed, nobody but its writer knows how much of it is written.
  a->set_size(inode.current ? v->size : 0);
  a->set_allocated(TotalLength(v->extents));
  a->set_checksum_type(v->checksum_type);
  a->set_checksum(v->checksum);
  a->set_leases(inode.current ? space_.refs(inode.current->gen) : 0);
  if (inode.pending) a->set_writer_session(inode.pending->writer_session);
}

void MetaEngine::FillDevice(const SpaceManager::Device &d, rpc::Device *dev) const {
  dev->set_index(d.index);
  dev->set_path(d.path);
  dev->set_size(d.allocator.capacity());
  dev->set_used(d.allocator.capacity() - d.allocator.free_bytes());
  dev->set_unit(d.allocator.unit());
  dev->set_epoch(d.superblock.epoch);
  dev->set_device_uuid(UuidBytes(d.superblock.device_uuid));
  if (auto it = agents_.find(d.index); it != agents_.end()) dev->set_agent(it->second.address);
}

void MetaEngine::FillChunk(const Inode &inode, const Version &v, uint64_t lease,
                           rpc::ChunkReply *rep, bool slim) const {
  rpc::Attr *a = rep->mutable_attr();
  if (slim) {
    a->set_ino(inode.ino);
    a->set_state(inode.current ? rpc::SEALED : rpc::WRITING);
    a->set_checksum_type(v.checksum_type);
    a->set_checksum(v.checksum);
  } else {
    FillAttr(inode, a);
    a->set_allocated(TotalLength(v.extents));
  }
  // A writer's reply describes its reservation, not the sealed version.
  a->set_gen(v.gen);
  a->set_size(v.size);
  ToWireExtents(v.extents, rep->mutable_extents());
  rep->set_lease(lease);
}

Result<Inode *> MetaEngine::MakeDirectory(Txn &txn, Inode *dir, const std::string &name,
                                          uint32_t mode, const Caller &c) {
  if (!MayAccess(*dir, c, kMayWrite | kMayExec)) return Status::Error(EACCES);
  auto inode = std::make_unique<Inode>();
  inode->ino = NextIno(txn);
  inode->mode = S_IFDIR | (mode & 07777);
  inode->uid = c.uid;
  inode->gid = (dir->mode & S_ISGID) ? dir->gid : c.gid;
  if (dir->mode & S_ISGID) inode->mode |= S_ISGID;
  inode->atime_ns = inode->mtime_ns = inode->ctime_ns = RealtimeNs();
  Inode *raw = tree_.Adopt(std::move(inode));
  tree_.Link(dir, raw, name);
  TouchDir(txn, dir);
  txn.Dirty(raw);
  return raw;
}

NamespaceTree::MakeDir MetaEngine::DirMaker(Txn &txn, const Caller &c) {
  return [this, &txn, &c](Inode *dir, const std::string &name) {
    return MakeDirectory(txn, dir, name, 0755, c);
  };
}

void MetaEngine::TouchDir(Txn &txn, Inode *dir) {
  dir->mtime_ns = dir->ctime_ns = RealtimeNs();
  txn.Dirty(dir);
}

void MetaEngine::UnrefGen(Txn &txn, uint64_t gen) {
  space_.Unref(gen, &txn.batch);
}

void MetaEngine::SetParentChunk(Inode *inode, uint64_t parent) {
  if (inode->parent_chunk == parent) return;
  if (inode->parent_chunk) {
    auto it = extensions_.find(inode->parent_chunk);
    if (it != extensions_.end()) {
      it->second.erase(inode->ino);
      if (it->second.empty()) extensions_.erase(it);
    }
  }
  if (parent) extensions_[parent].insert(inode->ino);
  // A re-insert keeps what the policy knows about the chunk's extensions.
  if (inode->current) eviction_->OnInsert(inode->ino, parent);
  inode->parent_chunk = parent;
}

// Takes a file's content out of reach: the sealed version is retired, and a
// reservation still being written becomes an orphan its writer can only
// abort.
void MetaEngine::RemoveFile(Txn &txn, Inode *inode) {
  tree_.Unlink(inode);
  SetParentChunk(inode, 0);
  extensions_.erase(inode->ino);  // what extends it keeps a dangling parent
  if (inode->pinned) --pins_;
  if (inode->current) {
    eviction_->OnRemove(inode->ino);
    space_.Retire(inode->current->gen, inode->current->extents, &txn.batch);
  }
  if (inode->pending) {
    if (Session *s = sessions_.Find(inode->pending->writer_session)) {
      s->reservations.erase(inode->ino);
      s->orphan_gens.insert(inode->pending->gen);
    }
    reserved_bytes_ -= TotalLength(inode->pending->extents);
    space_.Retire(inode->pending->gen, inode->pending->extents, &txn.batch, &*inode->pending);
  }
  txn.Deleted(inode->ino);
  tree_.Release(inode->ino);
}

void MetaEngine::RemoveTree(Txn &txn, Inode *inode) {
  if (!inode->is_dir()) return RemoveFile(txn, inode);
  std::vector<uint64_t> children;
  for (const auto &[name, ino] : inode->children) children.push_back(ino);
  for (uint64_t ino : children)
    if (Inode *child = tree_.Find(ino)) RemoveTree(txn, child);
  tree_.Unlink(inode);
  txn.Deleted(inode->ino);
  tree_.Release(inode->ino);
}

// Ends a reservation without publishing it. A file that never had a sealed
// version disappears with it.
void MetaEngine::DropPending(Txn &txn, Inode *inode, bool keep_inode_record) {
  Version v = std::move(*inode->pending);
  inode->pending.reset();
  reserved_bytes_ -= TotalLength(v.extents);
  if (Session *s = sessions_.Find(v.writer_session)) s->reservations.erase(inode->ino);
  UnrefGen(txn, v.gen);
  space_.Retire(v.gen, v.extents, &txn.batch);
  if (inode->current || keep_inode_record) {
    txn.Dirty(inode);
    return;
  }
  if (Inode *dir = tree_.Find(inode->parent)) TouchDir(txn, dir);
  if (inode->pinned) --pins_;
  tree_.Unlink(inode);
  txn.Deleted(inode->ino);
  tree_.Release(inode->ino);
}

void MetaEngine::ExpireSession(Txn &txn, uint64_t id) {
  Session *s = sessions_.Find(id);
  if (!s) return;
  for (uint64_t lease_id : s->leases)
    if (std::optional<Lease> lease = leases_.Take(lease_id, id)) UnrefGen(txn, lease->gen);
  for (uint64_t ino : std::vector<uint64_t>(s->reservations.begin(), s->reservations.end())) {
    Inode *inode = tree_.Find(ino);
    if (inode && inode->pending && inode->pending->writer_session == id)
      DropPending(txn, inode, false);
  }
  for (uint64_t gen : s->orphan_gens) UnrefGen(txn, gen);
  std::erase_if(agents_, [&](const auto &a) { return a.second.session == id; });
  sessions_.Remove(id);
}

uint64_t MetaEngine::Used() const {
  return space_.capacity() - space_.free_bytes();
}

uint64_t MetaEngine::ReclaimableUse(Txn &txn) {
  // Retired versions nobody reads are freed first; those still read stay
  // whatever is evicted, so they do not count.
  space_.Tick(MonotonicNs(), &txn.batch);
  return Used() - std::min(Used(), space_.retired_bytes());
}

void MetaEngine::EvictToLowWatermark(Txn &txn) {
  // During the grace after a restart evicted space is not freed, so
  // evicting would only empty the cache.
  if (space_.in_grace(MonotonicNs())) return;
  const double capacity = static_cast<double>(space_.capacity());
  const uint64_t use = ReclaimableUse(txn);
  if (static_cast<double>(use) <= options_.high_watermark * capacity) return;
  const uint64_t target = static_cast<uint64_t>(options_.low_watermark * capacity);
  if (use > target) EvictBytes(txn, use - target, "watermark");
}

bool MetaEngine::Evictable(const Inode &inode, int64_t now_ns) const {
  if (!inode.current || inode.pending || inode.ino == protected_ino_) return false;
  if (inode.pinned && (inode.pin_expiry_ns == 0 || inode.pin_expiry_ns > now_ns)) return false;
  return space_.refs(inode.current->gen) == 0;
}

uint64_t MetaEngine::EvictChunk(Txn &txn, Inode *inode, const char *reason) {
  uint64_t bytes = TotalLength(inode->current->extents);
  std::vector<uint64_t> descendants;
  if (eviction_->EvictsDescendants()) {
    // Chunks extending this one are useless without it.
    const int64_t now = RealtimeNs();
    std::vector<uint64_t> frontier{inode->ino};
    std::unordered_set<uint64_t> seen{inode->ino};  // chains set by hand may loop
    while (!frontier.empty()) {
      uint64_t at = frontier.back();
      frontier.pop_back();
      auto it = extensions_.find(at);
      if (it == extensions_.end()) continue;
      for (uint64_t child : it->second) {
        if (!seen.insert(child).second) continue;
        frontier.push_back(child);
        if (const Inode *other = tree_.Find(child); other && Evictable(*other, now))
          descendants.push_back(child);
      }
    }
  }
  RemoveFile(txn, inode);
  ++evictions_;
  evicted_bytes_ += bytes;
  ++evictions_by_reason_[reason];
  for (uint64_t ino : descendants) {
    Inode *d = tree_.Find(ino);
    if (!d || !d->current) continue;
    bytes += TotalLength(d->current->extents);
    evicted_bytes_ += TotalLength(d->current->extents);
    ++evictions_;
    ++evictions_by_reason_["prefix_gone"];
    RemoveFile(txn, d);
  }
  return bytes;
}

uint64_t MetaEngine::EvictBytes(Txn &txn, uint64_t bytes, const char *reason) {
  uint64_t evicted = 0;
  const int64_t now = RealtimeNs();
  while (evicted < bytes) {
    uint64_t victim = eviction_->Victim([&](uint64_t ino) {
      const Inode *inode = tree_.Find(ino);
      return inode && Evictable(*inode, now);
    });
    if (!victim) break;
    evicted += EvictChunk(txn, tree_.Find(victim), reason);
  }
  return evicted;
}

Result<ExtentList> MetaEngine::AllocateWithEviction(Txn &txn, uint64_t bytes) {
  Result<ExtentList> extents = space_.Allocate(bytes);
  if (!extents.ok() && extents.status().errnum() == ENOSPC) {
    const int64_t mono = MonotonicNs();
    // Space waiting for readers that are gone is free for the taking first.
    if (space_.Tick(mono, &txn.batch) > 0) extents = space_.Allocate(bytes);
  }
  if (!extents.ok() && extents.status().errnum() == ENOSPC) {
    const int64_t mono = MonotonicNs();
    if (space_.in_grace(mono))
      return Status::Error(ENOSPC,
                           "pool full, and space freed before the restart is still held "
                           "for returning readers");
    // Choose victims until they cover the shortfall; if they cannot, evict
    // nothing: a request that cannot fit must not empty the cache.
    const uint64_t unit = space_.unit();
    const uint64_t need = (bytes + unit - 1) / unit * unit;
    const uint64_t shortfall = need - std::min(need, space_.free_bytes());
    const int64_t now = RealtimeNs();
    std::unordered_set<uint64_t> chosen;
    uint64_t covered = 0;
    while (covered < shortfall) {
      uint64_t victim = eviction_->Victim([&](uint64_t ino) {
        const Inode *inode = tree_.Find(ino);
        return !chosen.count(ino) && inode && Evictable(*inode, now);
      });
      if (!victim) {
        LOG_DEBUG(
            "no room for %lu bytes: %lu free, %lu retired, %lu reserved, %zu chosen covering %lu",
            bytes, space_.free_bytes(), space_.retired_bytes(), reserved_bytes_, chosen.size(),
            covered);
        return Status::Error(ENOSPC, "pool full of pinned, open or unsealed chunks");
      }
      chosen.insert(victim);
      covered += TotalLength(tree_.Find(victim)->current->extents);
    }
    for (uint64_t ino : chosen)
      if (Inode *inode = tree_.Find(ino); inode && inode->current) EvictChunk(txn, inode, "full");
    extents = space_.Allocate(bytes);
  }
  if (extents.ok() && extents->size() > options_.max_fragments) {
    space_.FreeNow(*extents);
    return Status::Error(ENOSPC, "pool too fragmented");
  }
  return extents;
}

// --- Sessions -----------------------------------------------------------------

void MetaEngine::OpenSession(const Caller &c, const rpc::OpenSessionRequest &req,
                             rpc::OpenSessionReply *rep) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = req.resume();
  Session *s = id ? sessions_.Find(id) : nullptr;
  // Only a session waiting for its client (orphaned by a restart) may be
  // taken back, and only by its uid. A live one is someone's: taking it
  // would revoke leases its client still trusts. (A client whose resume
  // reply was lost gets a new session; the old one times out.)
  if (s && (s->uid != c.uid || !s->orphaned)) s = nullptr, id = 0;
  if (!s && id && sessions_.Find(id)) id = 0;
  Txn txn(this);
  if (!s) {
    if (!id) id = RandomSessionId();
    s = sessions_.Create(id);
    s->since_ns = RealtimeNs();
  } else {
    rep->set_resumed(true);
  }
  s->orphaned = false;
  s->client = req.client();
  s->hostname = req.hostname();
  s->pid = req.pid() ? req.pid() : c.pid;
  s->uid = c.uid;
  s->last_seen_ns = MonotonicNs();
  // Leases held across a restart: renew those whose version still exists.
  for (const rpc::HeldLease &held : req.held()) {
    // A version still current, or retired but kept (readers may hold it;
    // its file may be gone), can be leased again by a reader allowed to.
    const Inode *inode = tree_.Find(held.ino());
    bool live = (inode && inode->current && inode->current->gen == held.gen()) ||
                space_.retired().count(held.gen());
    if (!live || (inode && !MayAccess(*inode, c, kMayRead))) continue;
    uint64_t lease = leases_.Grant(id, held.ino(), held.gen());
    s->leases.insert(lease);
    space_.Ref(held.gen());
    rpc::HeldLease *r = rep->add_renewed();
    r->set_lease(held.lease());
    r->set_ino(lease);
    r->set_gen(held.gen());
  }
  txn.Commit();
  rep->set_session(id);
  rep->set_heartbeat_ms(options_.heartbeat_ms);
  rep->set_timeout_ms(static_cast<uint32_t>(options_.session_timeout_ms));
  rep->set_pool_uuid(pool_uuid_);
  rep->set_fast_lane(options_.fast_lane);
  for (const SpaceManager::Device &d : space_.devices()) FillDevice(d, rep->add_devices());
}

void MetaEngine::Heartbeat(const Caller &, const rpc::HeartbeatRequest &req,
                           rpc::HeartbeatReply *rep) {
  std::lock_guard<std::mutex> lock(mu_);
  Session *s = LiveSession(req.header().session());
  if (!s) return rep->set_error(ENOTCONN);
  if (req.header().release_size()) {
    Txn txn(this);
    ReleaseLeases(txn, s, req.header().release());
    txn.Commit();
  }
  rep->set_leases(static_cast<uint32_t>(s->leases.size()));
}

void MetaEngine::CloseSession(const Caller &, const rpc::HeartbeatRequest &req,
                              rpc::ErrorReply *rep) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!LiveSession(req.header().session())) return rep->set_error(ENOTCONN);
  Txn txn(this);
  ExpireSession(txn, req.header().session());
  rep->set_error(txn.Commit().errnum());
}

// Runs `op` under the lock for a live session, commits what it changed, and
// reports the first error.
template <typename Req, typename Rep, typename Op>
void MetaEngine::RunOp(const Req &req, Rep *rep, Op &&op) {
  std::lock_guard<std::mutex> lock(mu_);
  Session *session = LiveSession(req.header().session());
  if (!session) return rep->set_error(ENOTCONN);
  Txn txn(this);
  ReleaseLeases(txn, session, req.header().release());
  Status status = op(txn, session);
  Status committed = txn.Commit();
  if (status.ok()) status = committed;
  rep->set_error(status.errnum());
}

// --- Namespace ----------------------------------------------------------------

void MetaEngine::GetAttr(const Caller &c, const rpc::RefRequest &req, rpc::AttrReply *rep) {
  RunOp(req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    Result<Inode *> found = tree_.Resolve(req.ref(), c);
    if (!found.ok()) return found.status();
    const Inode &inode = **found;
    if (req.access() && !MayAccess(inode, c, static_cast<int>(req.access() & 7)))
      return Status::Error(EACCES);
    FillAttr(inode, rep->mutable_attr());
    if (req.with_extents()) {
      if (inode.current) ToWireExtents(inode.current->extents, rep->mutable_extents());
      if (const Inode *parent = inode.parent_chunk ? tree_.Find(inode.parent_chunk) : nullptr)
        rep->set_parent_path(tree_.PathOf(*parent));
    }
    return Status::Ok();
  });
}

void MetaEngine::Mkdir(const Caller &c, const rpc::MkdirRequest &req, rpc::AttrReply *rep) {
  RunOp(req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    Result<NamespaceTree::ParentAndName> pn =
        tree_.ResolveParent(req.ref(), c, req.parents() ? DirMaker(txn, c) : nullptr);
    if (!pn.ok()) {
      if (pn.status().errnum() == EEXIST && req.parents()) {
        FillAttr(*tree_.root(), rep->mutable_attr());
        return Status::Ok();
      }
      return pn.status();
    }
    if (Inode *existing = tree_.Child(*pn->dir, pn->name)) {
      if (req.parents() && existing->is_dir()) {
        FillAttr(*existing, rep->mutable_attr());
        return Status::Ok();
      }
      return Status::Error(EEXIST);
    }
    Result<Inode *> dir = MakeDirectory(txn, pn->dir, pn->name, req.mode(), c);
    if (!dir.ok()) return dir.status();
    FillAttr(**dir, rep->mutable_attr());
    return Status::Ok();
  });
}

Status MetaEngine::RemoveEntry(Txn &txn, const Caller &c, const rpc::Ref &ref, bool dir) {
  Result<NamespaceTree::ParentAndName> pn = tree_.ResolveParent(ref, c);
  if (!pn.ok())
    return pn.status().errnum() == EEXIST ? Status::Error(dir ? EBUSY : EISDIR) : pn.status();
  Inode *victim = tree_.Child(*pn->dir, pn->name);
  if (!victim) return Status::Error(ENOENT);
  if (dir && !victim->is_dir()) return Status::Error(ENOTDIR);
  if (!dir && victim->is_dir()) return Status::Error(EISDIR);
  if (!MayAccess(*pn->dir, c, kMayWrite | kMayExec)) return Status::Error(EACCES);
  if (!StickyAllows(*pn->dir, *victim, c)) return Status::Error(EPERM);
  if (dir && !victim->children.empty()) return Status::Error(ENOTEMPTY);
  RemoveTree(txn, victim);
  TouchDir(txn, pn->dir);
  return Status::Ok();
}

void MetaEngine::Rmdir(const Caller &c, const rpc::RefRequest &req, rpc::ErrorReply *rep) {
  RunOp(req, rep, [&](Txn &txn, Session *) { return RemoveEntry(txn, c, req.ref(), true); });
}

void MetaEngine::Unlink(const Caller &c, const rpc::RefRequest &req, rpc::ErrorReply *rep) {
  RunOp(req, rep, [&](Txn &txn, Session *) { return RemoveEntry(txn, c, req.ref(), false); });
}

void MetaEngine::Rename(const Caller &c, const rpc::RenameRequest &req, rpc::ErrorReply *rep) {
  RunOp(req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    Result<NamespaceTree::ParentAndName> from = tree_.ResolveParent(req.from(), c);
    if (!from.ok()) return from.status().errnum() == EEXIST ? Status::Error(EBUSY) : from.status();
    Result<NamespaceTree::ParentAndName> to = tree_.ResolveParent(req.to(), c);
    if (!to.ok()) return to.status().errnum() == EEXIST ? Status::Error(EBUSY) : to.status();
    Inode *src = tree_.Child(*from->dir, from->name);
    if (!src) return Status::Error(ENOENT);
    if (!MayAccess(*from->dir, c, kMayWrite | kMayExec) ||
        !MayAccess(*to->dir, c, kMayWrite | kMayExec))
      return Status::Error(EACCES);
    if (!StickyAllows(*from->dir, *src, c)) return Status::Error(EPERM);
    if (src->is_dir() && tree_.IsAncestor(*src, *to->dir)) return Status::Error(EINVAL);
    Inode *dst = tree_.Child(*to->dir, to->name);
    if (dst == src) return Status::Ok();
    if (dst) {
      if (req.noreplace()) return Status::Error(EEXIST);
      if (!StickyAllows(*to->dir, *dst, c)) return Status::Error(EPERM);
    }
    if (req.exchange()) {
      if (!dst) return Status::Error(ENOENT);
      if (dst->is_dir() && tree_.IsAncestor(*dst, *from->dir)) return Status::Error(EINVAL);
      tree_.Unlink(src);
      tree_.Unlink(dst);
      tree_.Link(to->dir, src, to->name);
      tree_.Link(from->dir, dst, from->name);
      src->ctime_ns = dst->ctime_ns = RealtimeNs();
      txn.Dirty(src);
      txn.Dirty(dst);
    } else {
      if (dst) {
        if (src->is_dir() && !dst->is_dir()) return Status::Error(ENOTDIR);
        if (!src->is_dir() && dst->is_dir()) return Status::Error(EISDIR);
        if (dst->is_dir() && !dst->children.empty()) return Status::Error(ENOTEMPTY);
        RemoveTree(txn, dst);
      }
      tree_.Unlink(src);
      tree_.Link(to->dir, src, to->name);
      src->ctime_ns = RealtimeNs();
      txn.Dirty(src);
    }
    TouchDir(txn, from->dir);
    TouchDir(txn, to->dir);
    return Status::Ok();
  });
}

void MetaEngine::Readdir(const Caller &c, const rpc::ReaddirRequest &req, rpc::ReaddirReply *rep) {
  RunOp(req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    Result<Inode *> dir = tree_.Resolve(req.ref(), c);
    if (!dir.ok()) return dir.status();
    if (!(*dir)->is_dir()) return Status::Error(ENOTDIR);
    if (!MayAccess(**dir, c, kMayRead)) return Status::Error(EACCES);
    FillAttr(**dir, rep->mutable_dir());
    uint32_t max = req.max() ? std::min(req.max(), kReaddirMax) : kReaddirDefault;
    auto it =
        req.after().empty() ? (*dir)->children.begin() : (*dir)->children.upper_bound(req.after());
    for (; it != (*dir)->children.end() && max > 0; ++it, --max) {
      const Inode *child = tree_.Find(it->second);
      if (!child) continue;
      rpc::DirEntry *e = rep->add_entries();
      e->set_name(it->first);
      FillAttr(*child, e->mutable_attr());
    }
    rep->set_eof(it == (*dir)->children.end());
    return Status::Ok();
  });
}

void MetaEngine::SetAttr(const Caller &c, const rpc::SetAttrRequest &req, rpc::AttrReply *rep) {
  RunOp(req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    Result<Inode *> found = tree_.Resolve(req.ref(), c);
    if (!found.ok()) return found.status();
    Inode *inode = *found;
    const bool owner = IsOwnerOrRoot(*inode, c);
    if ((req.set_mode() || (req.set_atime() && req.atime_ns() != -1) ||
         (req.set_mtime() && req.mtime_ns() != -1)) &&
        !owner)
      return Status::Error(EPERM);
    if (((req.set_atime() && req.atime_ns() == -1) || (req.set_mtime() && req.mtime_ns() == -1)) &&
        !owner && !MayAccess(*inode, c, kMayWrite))
      return Status::Error(EACCES);
    if (req.set_uid() && req.uid() != inode->uid && !c.is_root()) return Status::Error(EPERM);
    if (req.set_gid() && req.gid() != inode->gid &&
        !(c.is_root() || (owner && c.InGroup(req.gid()))))
      return Status::Error(EPERM);
    uint64_t parent_chunk = inode->parent_chunk;
    if (req.set_parent()) {
      if (!owner && !MayAccess(*inode, c, kMayWrite)) return Status::Error(EACCES);
      parent_chunk = 0;
      if (!req.parent_path().empty()) {
        rpc::Ref ref;
        ref.set_path(req.parent_path());
        Result<Inode *> parent = tree_.Resolve(ref, c);
        if (!parent.ok()) return parent.status();
        if (!(*parent)->is_file() || *parent == inode) return Status::Error(EINVAL);
        parent_chunk = (*parent)->ino;
      }
    }
    const int64_t now = RealtimeNs();
    if (req.set_mode()) {
      inode->mode = (inode->mode & S_IFMT) | (req.mode() & 07777);
      if (!c.is_root() && !c.InGroup(inode->gid)) inode->mode &= ~S_ISGID;
    }
    if (req.set_uid()) inode->uid = req.uid();
    if (req.set_gid()) inode->gid = req.gid();
    if ((req.set_uid() || req.set_gid()) && !inode->is_dir()) inode->mode &= ~(S_ISUID | S_ISGID);
    if (req.set_atime()) inode->atime_ns = req.atime_ns() == -1 ? now : req.atime_ns();
    if (req.set_mtime()) inode->mtime_ns = req.mtime_ns() == -1 ? now : req.mtime_ns();
    SetParentChunk(inode, parent_chunk);
    inode->ctime_ns = now;
    txn.Dirty(inode);
    FillAttr(*inode, rep->mutable_attr());
    return Status::Ok();
  });
}

void MetaEngine::Statfs(const Caller &, const rpc::StatfsRequest &req, rpc::StatfsReply *rep) {
  RunOp(req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    rep->set_total(space_.capacity());
    rep->set_free(space_.free_bytes());
    rep->set_files(tree_.size());
    rep->set_unit(space_.unit());
    rep->set_reserved(reserved_bytes_);
    rep->set_deferred(space_.retired_bytes());
    for (const SpaceManager::Device &d : space_.devices()) FillDevice(d, rep->add_devices());
    return Status::Ok();
  });
}

// --- Chunks -------------------------------------------------------------------

void MetaEngine::Create(const Caller &c, const rpc::CreateRequest &req, rpc::ChunkReply *rep) {
  RunOp(req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    const bool by_inode = req.ref().path().empty() && req.ref().name().empty();
    NamespaceTree::ParentAndName pn_by_inode;
    Result<NamespaceTree::ParentAndName> pn = pn_by_inode;
    Inode *inode = nullptr;
    if (by_inode) {
      // A new version of an existing file, named by its inode (FUSE O_TRUNC).
      inode = tree_.Find(req.ref().ino());
      if (!inode) return Status::Error(ESTALE);
      if (!req.truncate()) return Status::Error(EEXIST);
      Inode *dir = tree_.Find(inode->parent);
      if (!dir) return Status::Error(ESTALE);
      pn = NamespaceTree::ParentAndName{dir, inode->name};
    } else {
      pn = tree_.ResolveParent(req.ref(), c, req.parents() ? DirMaker(txn, c) : nullptr);
      if (!pn.ok()) return pn.status().errnum() == EEXIST ? Status::Error(EISDIR) : pn.status();
      if (!MayAccess(*pn->dir, c, kMayWrite | kMayExec)) return Status::Error(EACCES);
      inode = tree_.Child(*pn->dir, pn->name);
    }
    if (inode) {
      const std::optional<Version> &p = inode->pending;
      if (p && p->writer_session == session->id && req.request_id() &&
          p->request_id == req.request_id()) {
        FillChunk(*inode, *p, p->gen, rep);  // a retry of a create that went through
        return Status::Ok();
      }
      if (inode->is_dir()) return Status::Error(req.truncate() ? EISDIR : EEXIST);
      if (!req.truncate()) return Status::Error(EEXIST);
      if (p) return Status::Error(EBUSY);
      if (!MayAccess(*inode, c, kMayWrite)) return Status::Error(EACCES);
    }
    uint64_t parent_chunk = 0;
    if (!req.parent_chunk().empty()) {
      rpc::Ref ref;
      ref.set_path(req.parent_chunk());
      Result<Inode *> parent = tree_.Resolve(ref, c);
      if (!parent.ok()) return parent.status();
      if (!(*parent)->is_file()) return Status::Error(EINVAL, "a parent chunk must be a file");
      parent_chunk = (*parent)->ino;
    }
    ExtentList extents;
    if (req.size() > 0) {
      // The file being rewritten must not be evicted to make room for itself.
      protected_ino_ = inode ? inode->ino : 0;
      Result<ExtentList> got = AllocateWithEviction(txn, req.size());
      protected_ino_ = 0;
      if (!got.ok()) return got.status();
      extents = std::move(*got);
    }
    // Eviction may have taken the parent directory's other entries, never
    // the directory itself; re-check the name in case it was evicted.
    inode = tree_.Child(*pn->dir, pn->name);
    const int64_t now = RealtimeNs();
    if (!inode) {
      auto fresh = std::make_unique<Inode>();
      fresh->ino = NextIno(txn);
      fresh->mode = S_IFREG | (req.mode() & 07777);
      fresh->uid = c.uid;
      fresh->gid = (pn->dir->mode & S_ISGID) ? pn->dir->gid : c.gid;
      fresh->atime_ns = fresh->mtime_ns = fresh->ctime_ns = now;
      inode = tree_.Adopt(std::move(fresh));
      tree_.Link(pn->dir, inode, pn->name);
      TouchDir(txn, pn->dir);
    }
    if (parent_chunk) SetParentChunk(inode, parent_chunk);
    Version v;
    v.gen = NextGen(txn);
    v.size = req.size();
    v.extents = std::move(extents);
    v.writer_session = session->id;
    v.writer_uid = session->uid;
    v.request_id = req.request_id();
    v.created_ns = now;
    space_.Ref(v.gen);
    reserved_bytes_ += TotalLength(v.extents);
    session->reservations.insert(inode->ino);
    inode->pending = std::move(v);
    txn.Dirty(inode);
    FillChunk(*inode, *inode->pending, inode->pending->gen, rep);
    return Status::Ok();
  });
}

void MetaEngine::Extend(const Caller &, const rpc::ExtendRequest &req, rpc::ChunkReply *rep) {
  RunOp(req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    Inode *inode = tree_.Find(req.ino());
    if (!inode || !inode->pending || inode->pending->gen != req.gen())
      return Status::Error(session->orphan_gens.count(req.gen()) ? ENOENT : ESTALE);
    Version &v = *inode->pending;
    if (v.writer_session != session->id) return Status::Error(EPERM);
    uint64_t have = TotalLength(v.extents);
    if (req.size() > have) {
      Result<ExtentList> more = AllocateWithEviction(txn, req.size() - have);
      if (!more.ok()) return more.status();
      if (v.extents.size() + more->size() > options_.max_fragments) {
        space_.FreeNow(*more);
        return Status::Error(ENOSPC, "pool too fragmented");
      }
      reserved_bytes_ += TotalLength(*more);
      v.extents.insert(v.extents.end(), more->begin(), more->end());
    }
    v.size = std::max(v.size, req.size());
    txn.Dirty(inode);
    FillChunk(*inode, v, v.gen, rep);
    return Status::Ok();
  });
}

void MetaEngine::Seal(const Caller &, const rpc::SealRequest &req, rpc::ChunkReply *rep) {
  RunOp(req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    Inode *inode = tree_.Find(req.ino());
    if (!inode || !inode->pending || inode->pending->gen != req.gen()) {
      if (session->orphan_gens.erase(req.gen())) {
        UnrefGen(txn, req.gen());
        return Status::Error(ENOENT, "the file was removed while being written");
      }
      return Status::Error(ESTALE);
    }
    if (inode->pending->writer_session != session->id) return Status::Error(EPERM);
    Version v = std::move(*inode->pending);
    if (req.size() > TotalLength(v.extents)) {
      inode->pending = std::move(v);
      return Status::Error(EINVAL, "sealed size exceeds the reservation");
    }
    inode->pending.reset();
    session->reservations.erase(inode->ino);
    reserved_bytes_ -= TotalLength(v.extents);
    // Give back whole units past the end: nobody else ever saw them.
    const uint64_t keep = (req.size() + space_.unit() - 1) / space_.unit() * space_.unit();
    uint64_t offset = 0;
    ExtentList kept, trimmed;
    for (const Extent &e : v.extents) {
      if (offset >= keep)
        trimmed.push_back(e);
      else if (offset + e.length > keep) {
        kept.push_back(Extent{e.device, e.offset, keep - offset});
        trimmed.push_back(Extent{e.device, e.offset + keep - offset, e.length - (keep - offset)});
      } else {
        kept.push_back(e);
      }
      offset += e.length;
    }
    space_.FreeNow(trimmed);
    v.extents = std::move(kept);
    v.size = req.size();
    v.checksum_type = req.checksum_type();
    v.checksum = req.checksum();
    v.writer_session = 0;
    v.request_id = 0;
    if (inode->current) space_.Retire(inode->current->gen, inode->current->extents, &txn.batch);
    inode->current = std::move(v);
    inode->mtime_ns = inode->ctime_ns = RealtimeNs();
    eviction_->OnInsert(inode->ino, inode->parent_chunk);
    bytes_stored_ += req.size();
    uint64_t lease = 0;
    if (req.keep_lease()) {
      lease = leases_.Grant(session->id, inode->ino, inode->current->gen);
      session->leases.insert(lease);
    } else {
      UnrefGen(txn, inode->current->gen);
    }
    txn.Dirty(inode);
    FillChunk(*inode, *inode->current, lease, rep, true);
    EvictToLowWatermark(txn);
    return Status::Ok();
  });
}

void MetaEngine::Abort(const Caller &, const rpc::HandleRequest &req, rpc::ErrorReply *rep) {
  RunOp(req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    if (session->orphan_gens.erase(req.gen())) {
      UnrefGen(txn, req.gen());
      return Status::Ok();
    }
    Inode *inode = tree_.Find(req.ino());
    if (!inode || !inode->pending || inode->pending->gen != req.gen()) return Status::Error(ESTALE);
    if (inode->pending->writer_session != session->id) return Status::Error(EPERM);
    DropPending(txn, inode, false);
    return Status::Ok();
  });
}

Status MetaEngine::OpenForRead(const Caller &c, Session *s, Inode *inode, rpc::ChunkReply *rep) {
  if (inode->is_dir()) return Status::Error(EISDIR);
  if (!inode->is_file()) return Status::Error(EINVAL);
  if (!inode->current) return Status::Error(EBUSY, "being written");
  if (!MayAccess(*inode, c, kMayRead)) return Status::Error(EACCES);
  const uint64_t gen = inode->current->gen;
  uint64_t lease = leases_.Grant(s->id, inode->ino, gen);
  s->leases.insert(lease);
  space_.Ref(gen);
  ++inode->hits;
  inode->atime_ns = RealtimeNs();
  eviction_->OnAccess(inode->ino);
  bytes_loaded_ += inode->current->size;
  FillChunk(*inode, *inode->current, lease, rep, true);
  return Status::Ok();
}

void MetaEngine::Open(const Caller &c, const rpc::RefRequest &req, rpc::ChunkReply *rep) {
  RunOp(req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    ++lookups_;
    Result<Inode *> inode = tree_.Resolve(req.ref(), c);
    if (!inode.ok()) return inode.status();
    MARU_RETURN_IF_ERROR(OpenForRead(c, session, *inode, rep));
    ++lookup_hits_;
    return Status::Ok();
  });
}

void MetaEngine::ReleaseLeases(Txn &txn, Session *session,
                               const google::protobuf::RepeatedField<uint64_t> &ids) {
  for (uint64_t id : ids) {
    std::optional<Lease> lease = leases_.Take(id, session->id);
    if (!lease) continue;  // already released, or dropped with an old session
    session->leases.erase(id);
    UnrefGen(txn, lease->gen);
  }
}

void MetaEngine::Release(const Caller &, const rpc::ReleaseRequest &req, rpc::ErrorReply *rep) {
  RunOp(req, rep, [&](Txn &txn, Session *session) -> Status {
    ReleaseLeases(txn, session, req.leases());
    return Status::Ok();
  });
}

void MetaEngine::LookupPrefix(const Caller &c, const rpc::LookupPrefixRequest &req,
                              rpc::LookupPrefixReply *rep) {
  RunOp(req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    lookups_ += req.paths_size();
    for (const std::string &path : req.paths()) {
      rpc::Ref ref;
      ref.set_path(path);
      Result<Inode *> inode = tree_.Resolve(ref, c);
      Status s = inode.ok() ? OpenForRead(c, session, *inode, rep->add_hits()) : inode.status();
      if (!s.ok()) {
        if (inode.ok()) rep->mutable_hits()->RemoveLast();
        rep->set_miss_error(s.errnum());
        break;
      }
      ++lookup_hits_;
    }
    return Status::Ok();
  });
}

// --- Lifecycle and administration ---------------------------------------------

void MetaEngine::Pin(const Caller &c, const rpc::PinRequest &req, rpc::AttrReply *rep) {
  RunOp(req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    Result<Inode *> found = tree_.Resolve(req.ref(), c);
    if (!found.ok()) return found.status();
    Inode *inode = *found;
    if (!inode->is_file()) return Status::Error(EISDIR);
    if (!IsOwnerOrRoot(*inode, c) && !MayAccess(*inode, c, kMayWrite)) return Status::Error(EACCES);
    if (inode->pinned != req.pin()) pins_ += req.pin() ? 1 : -1;
    inode->pinned = req.pin();
    inode->pin_expiry_ns =
        req.pin() && req.ttl_ms()
            ? RealtimeNs() +
                  MsToNs(static_cast<int64_t>(std::min<uint64_t>(req.ttl_ms(), INT64_MAX)))
            : 0;
    inode->ctime_ns = RealtimeNs();
    txn.Dirty(inode);
    FillAttr(*inode, rep->mutable_attr());
    return Status::Ok();
  });
}

void MetaEngine::ListSessions(const Caller &c, const rpc::StatsRequest &req,
                              rpc::SessionsReply *rep) {
  RunOp(req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    const int64_t mono = MonotonicNs(), real = RealtimeNs();
    sessions_.ForEach([&](const Session &s) {
      rpc::SessionInfo *info = rep->add_sessions();
      // A session id lets its owner resume it: shown to the owner and root.
      info->set_id(c.is_root() || c.uid == s.uid ? s.id : 0);
      info->set_client(s.client);
      info->set_hostname(s.hostname);
      info->set_pid(s.pid);
      info->set_uid(s.uid);
      info->set_since_ns(s.since_ns);
      info->set_last_seen_ns(real - (mono - s.last_seen_ns));
      info->set_leases(static_cast<uint32_t>(s.leases.size()));
      info->set_reservations(static_cast<uint32_t>(s.reservations.size()));
      info->set_orphaned(s.orphaned);
    });
    return Status::Ok();
  });
}

void MetaEngine::Stats(const Caller &, const rpc::StatsRequest &req, rpc::StatsReply *rep) {
  RunOp(req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    FillStats(rep);
    return Status::Ok();
  });
}

void MetaEngine::Snapshot(rpc::StatsReply *rep) {
  std::lock_guard<std::mutex> lock(mu_);
  FillStats(rep);
}

void MetaEngine::FillStats(rpc::StatsReply *rep) {
  op_stats_.Fill(rep);
  rep->set_lookups(lookups_);
  rep->set_lookup_hits(lookup_hits_);
  rep->set_evictions(evictions_);
  rep->set_evicted_bytes(evicted_bytes_);
  for (const auto &[reason, n] : evictions_by_reason_)
    (*rep->mutable_evictions_by_reason())[reason] = n;
  rep->set_bytes_stored(bytes_stored_);
  rep->set_bytes_loaded(bytes_loaded_);
  rep->set_sessions(sessions_.size());
  rep->set_leases(leases_.size());
  rep->set_pins(pins_);
  rep->set_uptime_ns(MonotonicNs() - started_ns_);
  uint64_t chunks = 0;
  std::map<std::string, std::pair<uint64_t, uint64_t>> top;  // name -> bytes, chunks
  tree_.ForEach([&](const Inode &inode) {
    if (!inode.current) return;
    ++chunks;
    const Inode *at = &inode;
    while (at && at->parent != kRootIno) at = tree_.Find(at->parent);
    if (!at) return;
    auto &u = top[at->name];
    u.first += TotalLength(inode.current->extents);
    u.second += 1;
  });
  rep->set_chunks(chunks);
  for (const auto &[name, usage] : top) {
    rpc::DirUsage *d = rep->add_top_dirs();
    d->set_name(name);
    d->set_bytes(usage.first);
    d->set_chunks(usage.second);
  }
  for (const SpaceManager::Device &d : space_.devices()) FillDevice(d, rep->add_devices());
}

void MetaEngine::ListChunks(const Caller &c, const rpc::ListChunksRequest &req,
                            rpc::ListChunksReply *rep) {
  RunOp(req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    rpc::Ref ref;
    ref.set_path(req.path().empty() ? "/" : req.path());
    Result<Inode *> top = tree_.Resolve(ref, c);
    if (!top.ok()) return top.status();
    // Depth-first in name order, so `after` (a full path) resumes a listing.
    uint32_t max = req.max() ? std::min(req.max(), kReaddirMax) : kReaddirDefault;
    std::vector<std::pair<const Inode *, std::string>> stack{{*top, tree_.PathOf(**top)}};
    bool more = false;
    while (!stack.empty()) {
      auto [inode, path] = stack.back();
      stack.pop_back();
      if (inode->is_dir()) {
        if (!MayAccess(*inode, c, kMayRead | kMayExec)) continue;
        for (auto it = inode->children.rbegin(); it != inode->children.rend(); ++it)
          if (const Inode *child = tree_.Find(it->second))
            stack.emplace_back(child, (path == "/" ? "" : path) + "/" + it->first);
        continue;
      }
      if (!req.after().empty() && path <= req.after()) continue;
      if (max == 0) {
        more = true;
        break;
      }
      --max;
      rpc::ChunkInfo *info = rep->add_chunks();
      info->set_path(path);
      FillAttr(*inode, info->mutable_attr());
      if (inode->current) ToWireExtents(inode->current->extents, info->mutable_extents());
      if (const Inode *parent = inode->parent_chunk ? tree_.Find(inode->parent_chunk) : nullptr)
        info->set_parent_path(tree_.PathOf(*parent));
    }
    rep->set_eof(!more);
    return Status::Ok();
  });
}

void MetaEngine::Evict(const Caller &c, const rpc::EvictRequest &req, rpc::EvictReply *rep) {
  RunOp(req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    if (!c.is_root()) return Status::Error(EPERM, "eviction is for root");
    const uint64_t before = evictions_;
    uint64_t bytes = 0;
    if (!req.path().empty()) {
      rpc::Ref ref;
      ref.set_path(req.path());
      Result<Inode *> inode = tree_.Resolve(ref, c);
      if (!inode.ok()) return inode.status();
      if (!(*inode)->is_file()) return Status::Error(EISDIR);
      if (!Evictable(**inode, RealtimeNs()))
        return Status::Error(EBUSY, "pinned, open or being written");
      bytes += EvictChunk(txn, *inode, "admin");
    }
    if (req.older_than_ms() > 0) {
      const int64_t now = RealtimeNs();
      const int64_t cutoff = now - MsToNs(req.older_than_ms());
      std::vector<uint64_t> victims;
      tree_.ForEach([&](const Inode &inode) {
        if (Evictable(inode, now) && std::max(inode.atime_ns, inode.mtime_ns) < cutoff)
          victims.push_back(inode.ino);
      });
      for (uint64_t ino : victims)
        if (Inode *inode = tree_.Find(ino); inode && Evictable(*inode, now))
          bytes += EvictChunk(txn, inode, "admin");
    }
    if (req.bytes() > 0) bytes += EvictBytes(txn, req.bytes(), "admin");
    rep->set_chunks(evictions_ - before);
    rep->set_bytes(bytes);
    return Status::Ok();
  });
}

void MetaEngine::Fsck(const Caller &c, const rpc::StatsRequest &req, rpc::FsckReply *rep) {
  RunOp(req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    if (!c.is_root()) return Status::Error(EPERM, "fsck is for root");
    // Rebuild the free map from scratch and compare it with the live one.
    SpaceManager check;
    for (const SpaceManager::Device &d : space_.devices())
      check.AddDevice(d.index, d.path, d.superblock);
    uint64_t chunks = 0, extents = 0;
    tree_.ForEach([&](const Inode &inode) {
      for (const std::optional<Version> *v : {&inode.current, &inode.pending}) {
        if (!*v) continue;
        if (v == &inode.current) ++chunks;
        extents += (*v)->extents.size();
        if (TotalLength((*v)->extents) < (*v)->size)
          rep->add_problems(tree_.PathOf(inode) + ": extents shorter than its size");
        Status s = check.MarkUsed((*v)->extents);
        if (!s.ok()) rep->add_problems(tree_.PathOf(inode) + ": " + s.message());
      }
      if (!inode.is_dir() && !tree_.Find(inode.parent))
        rep->add_problems(tree_.PathOf(inode) + ": no parent directory");
    });
    for (const auto &[gen, ext] : space_.retired()) {
      Status s = check.MarkUsed(ext);
      if (!s.ok())
        rep->add_problems("retired generation " + std::to_string(gen) + ": " + s.message());
    }
    if (check.FreeMaps() != space_.FreeMaps())
      rep->add_problems("free space map differs from the extent maps (leak or double use)");
    rep->set_chunks(chunks);
    rep->set_extents(extents);
    return Status::Ok();
  });
}

void MetaEngine::RegisterAgent(const Caller &c, const rpc::RegisterAgentRequest &req,
                               rpc::RegisterAgentReply *rep) {
  RunOp(req, rep, [&](Txn &, Session *session) -> Status {
    if (!c.is_root()) return Status::Error(EPERM, "agents run as root");
    if (req.address().empty()) return Status::Error(EINVAL, "an agent needs an address");
    if (grant_key_.empty()) return Status::Error(EIO, "no grant key (no randomness at start)");
    for (const std::string &uuid : req.device_uuids()) {
      const SpaceManager::Device *found = nullptr;
      for (const SpaceManager::Device &d : space_.devices())
        if (UuidBytes(d.superblock.device_uuid) == uuid) found = &d;
      if (!found) return Status::Error(ENODEV, "not a device of this pool");
      agents_[found->index] = AgentInfo{req.address(), session->id};
    }
    rep->set_grant_key(grant_key_);
    return Status::Ok();
  });
}

Status MetaEngine::HoldsExtents(const Session &client, uint32_t device,
                                const google::protobuf::RepeatedPtrField<rpc::Extent> &extents,
                                bool writable) {
  // Every extent asked for must lie inside a version the client holds: a
  // lease on it, or its own reservation. Only a reservation is writable.
  std::vector<const ExtentList *> held, reserved;
  for (uint64_t lease_id : client.leases) {
    const Lease *lease = leases_.Find(lease_id);
    const Inode *inode = lease ? tree_.Find(lease->ino) : nullptr;
    if (inode && inode->current && inode->current->gen == lease->gen)
      held.push_back(&inode->current->extents);
    else if (lease && space_.retired().count(lease->gen))
      held.push_back(&space_.retired().at(lease->gen));
  }
  for (uint64_t ino : client.reservations)
    if (const Inode *inode = tree_.Find(ino); inode && inode->pending)
      reserved.push_back(&inode->pending->extents);
  for (uint64_t gen : client.orphan_gens)
    if (auto it = space_.retired().find(gen); it != space_.retired().end())
      held.push_back(&it->second);
  if (extents.empty()) return Status::Error(EINVAL, "no extents to check");
  auto covers = [&](const std::vector<const ExtentList *> &lists, const rpc::Extent &want) {
    for (const ExtentList *list : lists)
      for (const Extent &e : *list)
        if (e.device == device && e.device == want.device() && want.offset() >= e.offset &&
            want.offset() < e.end() && want.length() <= e.end() - want.offset())
          return true;
    return false;
  };
  for (const rpc::Extent &want : extents) {
    if (covers(reserved, want)) continue;
    // Not (or no longer) held: for a reader, its lease is gone.
    if (!covers(held, want))
      return Status::Error(ESTALE, "extent not leased or reserved by that session");
    if (writable) return Status::Error(EACCES, "a lease grants reading only");
  }
  return Status::Ok();
}

void MetaEngine::CheckExtents(const Caller &c, const rpc::CheckExtentsRequest &req,
                              rpc::ErrorReply *rep) {
  RunOp(req, rep, [&](Txn &, Session *) -> Status {
    if (!c.is_root()) return Status::Error(EPERM, "only agents check extents");
    Session *client = sessions_.Find(req.client_session());
    if (!client || client->orphaned) return Status::Error(ESTALE, "no such session");
    return HoldsExtents(*client, req.device(), req.extents(), req.writable());
  });
}

void MetaEngine::IssueGrant(const Caller &c, const rpc::IssueGrantRequest &req,
                            rpc::GrantReply *rep) {
  RunOp(req, rep, [&](Txn &, Session *session) -> Status {
    // A grant speaks for its session: only that session's own uid gets one.
    if (session->uid != c.uid && !c.is_root())
      return Status::Error(EPERM, "grants go to the session's own uid");
    if (req.extents_size() > 256) return Status::Error(E2BIG, "at most 256 extents per grant");
    MARU_RETURN_IF_ERROR(HoldsExtents(*session, req.device(), req.extents(), req.writable()));
    const uint32_t ttl =
        req.ttl_ms() == 0 ? kMaxGrantTtlMs : std::min(req.ttl_ms(), kMaxGrantTtlMs);
    rpc::Grant *g = rep->mutable_grant();
    g->set_session(session->id);
    g->set_uid(session->uid);
    g->set_device(req.device());
    *g->mutable_extents() = req.extents();
    g->set_writable(req.writable());
    g->set_serial(++grant_serial_);
    g->set_expires_ms(RealtimeNs() / 1000000 + ttl);
    g->set_mac(GrantMac(grant_key_, *g));
    return Status::Ok();
  });
}

void MetaEngine::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(this);
  const int64_t mono = MonotonicNs();
  for (uint64_t id : sessions_.Expired(mono, options_.session_timeout_ms * 1000000)) {
    const Session *s = sessions_.Find(id);
    LOG_INFO("session %016lx (%s, pid %u) %s: releasing %zu leases and %zu reservations", id,
             s->client.c_str(), s->pid, s->orphaned ? "did not come back" : "timed out",
             s->leases.size(), s->reservations.size());
    ExpireSession(txn, id);
  }
  const int64_t now = RealtimeNs();
  tree_.ForEach([&](const Inode &cinode) {
    if (cinode.pinned && cinode.pin_expiry_ns && cinode.pin_expiry_ns <= now) {
      Inode &inode = const_cast<Inode &>(cinode);
      inode.pinned = false;
      inode.pin_expiry_ns = 0;
      --pins_;
      txn.Dirty(&inode);
    }
  });
  EvictToLowWatermark(txn);
  txn.Commit();
}

}  // namespace maru
