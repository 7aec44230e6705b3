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

#include "alloc/extent_map.h"
#include "maru.pb.h"

namespace maru {

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

}  // namespace maru
