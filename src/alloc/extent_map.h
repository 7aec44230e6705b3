// A chunk's extents seen as one run of bytes: which piece of which device
// holds a given range of the chunk.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "alloc/extent.h"

namespace maru {

class ExtentMap {
 public:
  ExtentMap() = default;
  explicit ExtentMap(ExtentList extents);
  void Append(const ExtentList &more);
  uint64_t length() const { return length_; }
  const ExtentList &extents() const { return extents_; }
  // Calls f(device, device_offset, length, file_offset) for each piece of
  // [off, off+len) in turn, clipped to the mapped length.
  template <typename F>
  void ForEachPiece(uint64_t off, uint64_t len, F &&f) const;

 private:
  ExtentList extents_;
  std::vector<uint64_t> starts_;  // file offset where each extent begins
  uint64_t length_ = 0;
};

template <typename F>
void ExtentMap::ForEachPiece(uint64_t off, uint64_t len, F &&f) const {
  if (off >= length_) return;
  if (len > length_ - off) len = length_ - off;
  size_t i =
      static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), off) - starts_.begin()) -
      1;
  while (len > 0 && i < extents_.size()) {
    const Extent &e = extents_[i];
    uint64_t within = off - starts_[i];
    uint64_t take = std::min(len, e.length - within);
    f(e.device, e.offset + within, take, off);
    off += take;
    len -= take;
    ++i;
  }
}

}  // namespace maru
