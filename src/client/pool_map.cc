#include "client/pool_map.h"

#include <sys/mman.h>

namespace maru {

ChunkView::~ChunkView() {
  munmap(base_, length_);
}

Result<std::unique_ptr<PoolMap>> PoolMap::Open(const rpc::OpenSessionReply &session,
                                               Populate populate) {
  auto map = std::make_unique<PoolMap>();
  for (const rpc::Device &d : session.devices()) {
    Result<std::unique_ptr<PoolDevice>> dev = PoolDevice::Open(d.path(), {true, populate});
    if (!dev.ok() && dev.status().errnum() == EACCES) {
      dev = PoolDevice::Open(d.path(), {false, populate});
      map->writable_ = false;
    }
    if (!dev.ok()) return dev.status();
    const Superblock &sb = (*dev)->superblock();
    if (std::string(sb.device_uuid.begin(), sb.device_uuid.end()) != d.device_uuid() ||
        sb.epoch != d.epoch())
      return Status::Error(ENODEV,
                           d.path() + " on this host is not the pool device the server uses");
    if (sb.coherence == Coherence::kFlush) map->flush_ = true;
    if (map->devices_.size() <= d.index()) map->devices_.resize(d.index() + 1);
    map->devices_[d.index()] = std::move(*dev);
  }
  return map;
}

const PoolDevice *PoolMap::device(uint32_t index) const {
  return index < devices_.size() ? devices_[index].get() : nullptr;
}

bool PoolMap::Covers(const ExtentList &extents) const {
  for (const Extent &e : extents) {
    const PoolDevice *d = device(e.device);
    if (!d || e.offset > d->mapped_bytes() || e.length > d->mapped_bytes() - e.offset) return false;
  }
  return true;
}

bool PoolMap::Contains(const void *p, uint64_t len) const {
  for (const auto &d : devices_)
    if (d && d->Contains(p, len)) return true;
  return false;
}

Result<uint8_t *> PoolMap::Address(const ExtentList &extents,
                                   std::unique_ptr<ChunkView> *view) const {
  if (!Covers(extents)) return Status::Error(EIO, "extent outside the pool mapping");
  if (extents.empty()) return static_cast<uint8_t *>(nullptr);
  if (extents.size() == 1) return device(extents[0].device)->base() + extents[0].offset;

  // Reserve address space, then map each extent into its place.
  uint64_t total = TotalLength(extents);
  void *base = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return Status::Error(errno, "cannot reserve a chunk view");
  auto out = std::make_unique<ChunkView>(static_cast<uint8_t *>(base), total);
  uint64_t at = 0;
  for (const Extent &e : extents) {
    void *want = static_cast<uint8_t *>(base) + at;
    const int prot = PROT_READ | (writable_ ? PROT_WRITE : 0);
    void *got = mmap(want, e.length, prot, MAP_SHARED | MAP_FIXED | MAP_POPULATE,
                     device(e.device)->fd(), static_cast<off_t>(e.offset));
    if (got == MAP_FAILED) return Status::Error(errno, "cannot map a chunk extent");
    at += e.length;
  }
  *view = std::move(out);
  return static_cast<uint8_t *>(base);
}

}  // namespace maru
