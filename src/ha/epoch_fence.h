// EpochFence: one leader's hold on the pool's fencing epoch, checked before
// every write to shared structures.
//
// etcd hands each leader a higher epoch (ha/leader_election.h). The leader
// raises the epoch in the pool's control page (alloc/pool_control.h) to its
// own before it writes anything shared, and refuses to lead if the pool's
// is already higher. A writer checks Ok() before each write: once a newer
// leader raised the epoch, the old one's checks fail, however late it wakes
// from a freeze and whatever it still believes about its etcd lease.
//
// The word is in memory every pool user can write; the worst a member of
// that trust domain can do by raising it is to stop the leader (which then
// steps down), never to make a stale leader write.
#pragma once

#include <cstdint>

#include "alloc/pool_control.h"
#include "util/status.h"

namespace maru {

class EpochFence {
 public:
  EpochFence(PoolControl control, uint64_t ours) : control_(control), ours_(ours) {}

  // Raises the pool's epoch to ours. ESTALE (refuse to lead) if it is
  // already past ours; ok if it equals ours.
  Status Raise() { return control_.RaiseFence(ours_); }
  // True while the pool's epoch is still ours: one atomic load (after a
  // cache-line invalidation on a pool without hardware coherence).
  bool Ok() const { return control_.Holds(ours_); }
  uint64_t ours() const { return ours_; }

 private:
  PoolControl control_;
  const uint64_t ours_;
};

}  // namespace maru
