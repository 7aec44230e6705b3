// Free space of one pool device, in allocation units.
//
// Best fit: a request is served from the smallest free run that holds it
// whole; only when no run is large enough is it split over the largest runs.
// Freed extents coalesce with their neighbours at once, so a device that has
// everything back holds exactly one free run. The free map is never stored:
// it is rebuilt at start by marking every extent the metadata references.
//
// Not thread-safe; the owner serializes calls.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "alloc/extent.h"
#include "util/status.h"

namespace maru {

class ExtentAllocator {
 public:
  // Manages [begin, end) of device `device`; both multiples of `unit`.
  ExtentAllocator(uint32_t device, uint64_t begin, uint64_t end, uint64_t unit);

  // Reserves at least `bytes` (rounded up to the unit), contiguous when any
  // free run is large enough. ENOSPC when the device lacks the space.
  Result<ExtentList> Allocate(uint64_t bytes);
  // Returns an extent. EINVAL if it is misaligned, outside the device, or
  // overlaps free space (a double free), in which case nothing changes.
  Status Free(const Extent &extent);
  // Marks a specific extent used, as during the rebuild at start. EINVAL if
  // any part of it is not free (an overlap between two files).
  Status MarkUsed(const Extent &extent);

  uint64_t unit() const { return unit_; }
  uint64_t capacity() const { return end_ - begin_; }
  uint64_t free_bytes() const { return free_bytes_; }
  uint64_t largest_free() const;
  size_t free_runs() const { return by_offset_.size(); }
  // Free runs by offset, for checks and tests.
  const std::map<uint64_t, uint64_t> &free_map() const { return by_offset_; }

 private:
  Status CheckExtent(const Extent &extent) const;
  void InsertRun(uint64_t offset, uint64_t length);
  void EraseRun(std::map<uint64_t, uint64_t>::iterator it);
  Extent TakeFrom(std::map<uint64_t, uint64_t>::iterator it, uint64_t length);

  uint32_t device_;
  uint64_t begin_, end_, unit_;
  uint64_t free_bytes_ = 0;
  std::map<uint64_t, uint64_t> by_offset_;           // offset -> length
  std::set<std::pair<uint64_t, uint64_t>> by_size_;  // (length, offset)
};

}  // namespace maru
