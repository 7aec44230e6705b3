// What maru-fuse keeps for an open file.
//
// A reader holds a lease on one sealed version and serves reads straight
// from the pool mapping. A writer holds a reservation (extents it alone may
// write, grown on demand) and tracks the size it has written; it seals the
// file when the writer closes it (flush). Until then, processes on this
// mount share the writer's bytes (one kernel inode, as on a local
// filesystem); other mounts and libmaru_direct see the previous sealed
// version, or EBUSY if there is none.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "alloc/extent.h"
#include "maru.pb.h"

namespace maru {

class PoolMap;

// Where file offsets lie in the pool: a cursor over a chunk's extents.
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

struct OpenFile {
  uint64_t ino = 0;
  bool writer = false;
  std::mutex mu;        // writers: serializes growth and sealing
  uint64_t gen = 0;     // the version read, or being written
  uint64_t size = 0;    // readers: sealed size; writers: bytes written so far
  ExtentMap map;        // where the bytes are
  uint64_t lease = 0;   // MetaClient lease handle once there is one, else 0
  bool sealed = false;  // writers: published by a flush
  bool dirty = false;   // writers: written since the last seal
  rpc::Caller caller;   // writers: who opened it, for the seal
  // Readers of a file this mount is writing read the writer's bytes: one
  // kernel inode, one file, as on a local filesystem.
  std::shared_ptr<OpenFile> follows;
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
