// The pool's control page: the page after the superblock, where the server
// that leads a pool fences out every server that led it before (docs/ha.md).
//
// The fencing epoch only grows. A server raises it (compare-and-swap) to the
// epoch its election gave it before it touches any shared structure, and
// checks that it still holds it (one load) before each write to the index,
// the lease slots or the replication log: a leader that lost its lease and
// woke up late finds a newer epoch here and stops, even when it cannot reach
// etcd to learn it lost. Clients compare a server's epoch with this one and
// refuse a server that is behind.
//
// The leader record (id, endpoint, heartbeat) is advice for clients and
// tools, under a seqlock; nothing relies on it for safety.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "alloc/superblock.h"
#include "util/status.h"

namespace maru {

struct LeaderRecord {
  uint64_t epoch = 0;
  std::string id;            // the member's name
  std::string endpoint;      // where clients reach it
  int64_t heartbeat_ns = 0;  // CLOCK_REALTIME of its last heartbeat
};

// A view of the control page inside a mapping of the pool. Cheap to copy.
class PoolControl {
 public:
  // The control page of a pool mapped at `base` (the whole device, or at
  // least its first superblock.control_offset + kControlBytes bytes).
  // EINVAL if the pool was formatted without one.
  static Result<PoolControl> At(uint8_t *base, const Superblock &sb);

  // The fencing epoch in the pool now.
  uint64_t FenceEpoch() const;
  // Raises the fencing epoch to `epoch`. ESTALE, naming both, if the pool
  // is already fenced at a higher epoch (a newer leader exists).
  Status RaiseFence(uint64_t epoch);
  // True while the pool's fencing epoch is still `epoch`: call before every
  // write to a shared structure.
  bool Holds(uint64_t epoch) const { return FenceEpoch() == epoch; }

  // Publishes the leader record (the caller holds `epoch`).
  void SetLeader(const LeaderRecord &leader);
  void Heartbeat(int64_t now_ns);
  // The leader record; empty id and endpoint if it kept changing (or a
  // writer died halfway) while read.
  LeaderRecord Leader() const;

  struct Page;  // the on-device layout

 private:
  PoolControl(Page *page, bool flush) : page_(page), flush_(flush) {}
  Page *page_;
  bool flush_;  // Coherence::kFlush: write back what is written, invalidate before reads
};

}  // namespace maru
