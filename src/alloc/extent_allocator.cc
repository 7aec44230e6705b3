#include "alloc/extent_allocator.h"

namespace maru {

ExtentAllocator::ExtentAllocator(uint32_t device, uint64_t begin, uint64_t end, uint64_t unit)
    : device_(device), begin_(begin), end_(end), unit_(unit) {
  if (end_ > begin_) InsertRun(begin_, end_ - begin_);
}

uint64_t ExtentAllocator::largest_free() const {
  return by_size_.empty() ? 0 : by_size_.rbegin()->first;
}

void ExtentAllocator::InsertRun(uint64_t offset, uint64_t length) {
  by_offset_.emplace(offset, length);
  by_size_.emplace(length, offset);
  free_bytes_ += length;
}

void ExtentAllocator::EraseRun(std::map<uint64_t, uint64_t>::iterator it) {
  by_size_.erase({it->second, it->first});
  free_bytes_ -= it->second;
  by_offset_.erase(it);
}

Extent ExtentAllocator::TakeFrom(std::map<uint64_t, uint64_t>::iterator it, uint64_t length) {
  uint64_t offset = it->first, run = it->second;
  EraseRun(it);
  if (run > length) InsertRun(offset + length, run - length);
  return Extent{device_, offset, length};
}

Result<ExtentList> ExtentAllocator::Allocate(uint64_t bytes) {
  if (bytes == 0) return Status::Error(EINVAL, "empty allocation");
  if (bytes > capacity()) return Status::Error(EFBIG, "larger than the device");
  uint64_t need = (bytes + unit_ - 1) / unit_ * unit_;
  if (need > free_bytes_) return Status::Error(ENOSPC, "pool full");
  ExtentList out;
  while (need > 0) {
    // Best fit for what is left; else the largest run, and go on.
    auto fit = by_size_.lower_bound({need, 0});
    auto pick = fit != by_size_.end() ? *fit : *by_size_.rbegin();
    uint64_t take = std::min(need, pick.first);
    out.push_back(TakeFrom(by_offset_.find(pick.second), take));
    need -= take;
  }
  return out;
}

Status ExtentAllocator::CheckExtent(const Extent &e) const {
  if (e.device != device_) return Status::Error(EINVAL, "extent on another device");
  if (e.length == 0 || e.offset % unit_ || e.length % unit_)
    return Status::Error(EINVAL, "extent not aligned to the allocation unit");
  if (e.offset < begin_ || e.offset > end_ || e.length > end_ - e.offset)
    return Status::Error(EINVAL, "extent outside the device");
  return Status::Ok();
}

Status ExtentAllocator::Free(const Extent &e) {
  MARU_RETURN_IF_ERROR(CheckExtent(e));
  auto next = by_offset_.lower_bound(e.offset);
  if (next != by_offset_.end() && next->first < e.end())
    return Status::Error(EINVAL, "double free: extent overlaps free space");
  auto prev = next == by_offset_.begin() ? by_offset_.end() : std::prev(next);
  if (prev != by_offset_.end() && prev->first + prev->second > e.offset)
    return Status::Error(EINVAL, "double free: extent overlaps free space");

  uint64_t offset = e.offset, length = e.length;
  if (prev != by_offset_.end() && prev->first + prev->second == offset) {
    offset = prev->first;
    length += prev->second;
    EraseRun(prev);
  }
  if (next != by_offset_.end() && next->first == e.end()) {
    length += next->second;
    EraseRun(next);
  }
  InsertRun(offset, length);
  return Status::Ok();
}

Status ExtentAllocator::MarkUsed(const Extent &e) {
  MARU_RETURN_IF_ERROR(CheckExtent(e));
  auto it = by_offset_.upper_bound(e.offset);
  if (it == by_offset_.begin()) return Status::Error(EINVAL, "extent overlaps used space");
  --it;
  uint64_t run_offset = it->first, run_length = it->second;
  if (run_offset + run_length < e.end()) return Status::Error(EINVAL, "extent overlaps used space");
  EraseRun(it);
  if (run_offset < e.offset) InsertRun(run_offset, e.offset - run_offset);
  if (e.end() < run_offset + run_length) InsertRun(e.end(), run_offset + run_length - e.end());
  return Status::Ok();
}

}  // namespace maru
