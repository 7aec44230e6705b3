// An extent: a run of bytes on one pool device.
#pragma once

#include <cstdint>
#include <vector>

namespace maru {

struct Extent {
  uint32_t device = 0;
  uint64_t offset = 0;  // from the start of the device (superblock included)
  uint64_t length = 0;

  uint64_t end() const { return offset + length; }
  bool operator==(const Extent &) const = default;
};

using ExtentList = std::vector<Extent>;

inline uint64_t TotalLength(const ExtentList &extents) {
  uint64_t total = 0;
  for (const Extent &e : extents) total += e.length;
  return total;
}

}  // namespace maru
