#include "meta/space_manager.h"

#include "meta/records.h"
#include "util/clock.h"
#include "util/dcheck.h"
#include "util/log.h"

namespace maru {

void SpaceManager::AddDevice(uint32_t index, const std::string &path, const Superblock &sb) {
  devices_.push_back(
      Device{index, path, sb, ExtentAllocator(index, sb.data_offset, sb.size, sb.unit)});
}

const SpaceManager::Device *SpaceManager::device(uint32_t index) const {
  for (const Device &d : devices_)
    if (d.index == index) return &d;
  return nullptr;
}

SpaceManager::Device *SpaceManager::mutable_device(uint32_t index) {
  return const_cast<Device *>(device(index));
}

Result<ExtentList> SpaceManager::Allocate(uint64_t bytes) {
  // Prefer a device that holds the request in one run, then the emptiest.
  Device *best = nullptr;
  bool best_contiguous = false;
  for (Device &d : devices_) {
    uint64_t need = (bytes + d.allocator.unit() - 1) / d.allocator.unit() * d.allocator.unit();
    if (d.allocator.free_bytes() < need) continue;
    bool contiguous = d.allocator.largest_free() >= need;
    if (!best || (contiguous && !best_contiguous) ||
        (contiguous == best_contiguous &&
         d.allocator.free_bytes() > best->allocator.free_bytes())) {
      best = &d;
      best_contiguous = contiguous;
    }
  }
  if (!best) {
    for (const Device &d : devices_)
      if (bytes <= d.allocator.capacity()) return Status::Error(ENOSPC, "pool full");
    return Status::Error(EFBIG, "larger than any pool device");
  }
  return best->allocator.Allocate(bytes);
}

Status SpaceManager::MarkUsed(const ExtentList &extents) {
  for (const Extent &e : extents) {
    Device *d = mutable_device(e.device);
    if (!d) return Status::Error(EINVAL, "extent on unknown device " + std::to_string(e.device));
    MARU_RETURN_IF_ERROR(d->allocator.MarkUsed(e));
  }
  return Status::Ok();
}

void SpaceManager::FreeNow(const ExtentList &extents) {
  for (const Extent &e : extents) {
    Device *d = mutable_device(e.device);
    Status s = d ? d->allocator.Free(e) : Status::Error(EINVAL, "unknown device");
    if (!s.ok())
      LOG_ERROR("freeing extent %u:%lu+%lu: %s", e.device, e.offset, e.length,
                s.ToString().c_str());
  }
}

uint32_t SpaceManager::refs(uint64_t gen) const {
  auto it = refs_.find(gen);
  return it == refs_.end() ? 0 : it->second;
}

uint64_t SpaceManager::Unref(uint64_t gen, MetaDb::Batch *batch) {
  auto it = refs_.find(gen);
  if (it == refs_.end()) return 0;
  MARU_DCHECK(it->second > 0);  // a count that reaches 0 is erased
  if (--it->second > 0) return 0;
  refs_.erase(it);
  auto retired = retired_.find(gen);
  if (retired == retired_.end() || in_grace(MonotonicNs())) return 0;
  if (outside_.held && outside_.held(gen)) return 0;  // freed by a later Tick
  return FreeRetired(retired, batch);
}

uint64_t SpaceManager::Retire(uint64_t gen, const ExtentList &extents, MetaDb::Batch *batch,
                              const Version *writing, uint64_t ino) {
  if (extents.empty()) return 0;
  if (outside_.retiring) outside_.retiring(gen);
  if (!in_use(gen) && !in_grace(MonotonicNs())) {
    FreeNow(extents);
    return TotalLength(extents);
  }
  // A version's extents have one owner: retired once, by the one version.
  MARU_DCHECK(retired_.count(gen) == 0);
  retired_[gen] = extents;
  retired_bytes_ += TotalLength(extents);
  if (ino) retired_ino_[gen] = ino;
  batch->PutRetired(ToRetiredRecord(gen, extents, writing, ino));
  return 0;
}

ExtentList SpaceManager::TakeRetired(uint64_t gen, MetaDb::Batch *batch) {
  auto it = retired_.find(gen);
  if (it == retired_.end()) return {};
  ExtentList extents = std::move(it->second);
  MARU_DCHECK(retired_bytes_ >= TotalLength(extents));
  retired_bytes_ -= TotalLength(extents);
  retired_.erase(it);
  retired_ino_.erase(gen);
  batch->DeleteRetired(gen);
  return extents;
}

void SpaceManager::RestoreRetired(uint64_t gen, const ExtentList &extents, uint64_t ino) {
  retired_[gen] = extents;
  retired_bytes_ += TotalLength(extents);
  if (ino) retired_ino_[gen] = ino;
}

uint64_t SpaceManager::RetiredIno(uint64_t gen) const {
  auto it = retired_ino_.find(gen);
  return it == retired_ino_.end() ? 0 : it->second;
}

uint64_t SpaceManager::FreeRetired(std::map<uint64_t, ExtentList>::iterator it,
                                   MetaDb::Batch *batch) {
  uint64_t bytes = TotalLength(it->second);
  if (on_free_) on_free_(it->first);
  FreeNow(it->second);
  MARU_DCHECK(retired_bytes_ >= bytes);
  retired_bytes_ -= bytes;
  batch->DeleteRetired(it->first);
  retired_ino_.erase(it->first);
  retired_.erase(it);
  return bytes;
}

uint64_t SpaceManager::Tick(int64_t now_mono_ns, MetaDb::Batch *batch) {
  if (in_grace(now_mono_ns)) return 0;
  uint64_t freed = 0;
  for (auto it = retired_.begin(); it != retired_.end();) {
    auto next = std::next(it);
    if (!in_use(it->first)) freed += FreeRetired(it, batch);
    it = next;
  }
  return freed;
}

uint64_t SpaceManager::unit() const {
  return devices_.empty() ? 0 : devices_[0].allocator.unit();
}

uint64_t SpaceManager::capacity() const {
  uint64_t total = 0;
  for (const Device &d : devices_) total += d.allocator.capacity();
  return total;
}

uint64_t SpaceManager::free_bytes() const {
  uint64_t total = 0;
  for (const Device &d : devices_) total += d.allocator.free_bytes();
  return total;
}

std::vector<std::map<uint64_t, uint64_t>> SpaceManager::FreeMaps() const {
  std::vector<std::map<uint64_t, uint64_t>> maps;
  for (const Device &d : devices_) maps.push_back(d.allocator.free_map());
  return maps;
}

}  // namespace maru
