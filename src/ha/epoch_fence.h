// EpochFence: the pool's copy of the fencing epoch, checked before every write
// to shared structures.
//
// etcd hands each leader a higher epoch (ha/leader_election.h). The leader
// raises the epoch word in the pool's control page to its own before it
// writes anything shared, and refuses to lead if the pool's is already
// higher. A writer checks Ok() before each write: once a newer leader
// raised the word, the old one's checks fail, however late it wakes from a
// freeze, whatever it still believes about its etcd lease.
//
// The word is in memory every pool user can write; the worst a member of
// that trust domain can do by raising it is to stop the leader (which then
// steps down), not to make a stale leader write.
#pragma once

#include <atomic>
#include <cstdint>

#include "util/status.h"

namespace maru {

class EpochFence {
 public:
  // `word`: the epoch in the pool's control page (8-byte aligned). `flush`:
  // the pool is not coherent in hardware, so each check invalidates the
  // line first and a raise writes it back.
  EpochFence(std::atomic<uint64_t> *word, uint64_t ours, bool flush);

  // Raises the pool's epoch to ours by compare-and-swap. EEXIST (refuse to
  // lead) if it is already past ours; ok if it equals ours.
  Status Raise();
  // True while the pool's epoch is still ours: one atomic load (plus a
  // cache-line invalidation on a flush pool).
  bool Ok() const;
  uint64_t ours() const { return ours_; }
  // The pool's epoch now.
  uint64_t Current() const;

 private:
  std::atomic<uint64_t> *const word_;
  const uint64_t ours_;
  const bool flush_;
};

}  // namespace maru
