#include "alloc/extent_map.h"

namespace maru {

ExtentMap::ExtentMap(ExtentList extents) {
  Append(extents);
}

void ExtentMap::Append(const ExtentList &more) {
  for (const Extent &e : more) {
    starts_.push_back(length_);
    extents_.push_back(e);
    length_ += e.length;
  }
}

}  // namespace maru
