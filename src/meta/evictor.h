// Evictor: makes room in the pool by evicting sealed chunks nobody uses.
//
// It owns victim selection: the EvictionPolicy that orders the chunks, the
// ChunkChains that policy and the prefix-gone rule read (which chunks extend
// which), the rule for what may go (sealed, not pinned, not leased, not the
// chunk the operation itself works on), and the eviction counters. The
// engine tells it when chunks are sealed, read, re-parented, restored and
// removed.
//
// Chunks that may not go (leased, pinned, being rewritten) are kept out of
// the policy's order once an eviction meets them (parked), and put back in
// their place when the engine says what held them is gone (Changed,
// Unreferenced) or their pin's deadline passes. So a create on a full pool
// costs O(victims x log n) however many chunks are held, not a walk past
// them each time.
//
// Evicting is removing a file, which only the engine can do (sessions,
// pins, reservations, its transaction). So each eviction call is handed a
// Scope: how to remove a chunk within the calling operation's transaction,
// and where that transaction records freed space.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "meta/chunk_chains.h"
#include "meta/eviction_policy.h"
#include "meta/meta_db.h"
#include "meta/namespace_tree.h"
#include "meta/space_manager.h"
#include "proto/maru.pb.h"

namespace maru {

class Evictor {
 public:
  struct Scope {
    std::function<void(Inode *)> remove;  // the engine's removal, in its transaction
    MetaDb::Batch *batch;                 // where freeing retired space is recorded
  };
  struct Watermarks {
    double high;  // start evicting above this fraction used
    double low;   // ... until usage is below this
  };

  // `policy`: "frequency", "lru" or "prefix". The tree and space must outlive the Evictor.
  static Result<std::unique_ptr<Evictor>> Make(const std::string &policy, Watermarks watermarks,
                                               NamespaceTree *tree, SpaceManager *space);

  // What the engine tells: a version was sealed, a chunk read, a chunk's
  // parent chunk changed, a chunk came back from the database, a chunk is
  // being removed (before it goes).
  void Sealed(const Inode &inode);
  void Read(const Inode &inode);
  void SetParent(Inode *inode, uint64_t parent);
  void Restored(const Inode &inode);
  // Room for `chunks` restored chunks in the policy's tables.
  void Reserve(size_t chunks) { policy_->Reserve(chunks); }
  void Removed(const Inode &inode);
  // A client's retention hint on a chunk (the engine checked who may).
  void Hint(const Inode &inode, RetentionHint hint);
  // A chunk's pin or reservation may have changed (the engine's
  // transaction marked it dirty): a parked chunk that may go now goes back.
  void Changed(const Inode &inode);
  // A reference on generation `gen` was dropped (a lease released, a
  // writer gone): the chunk whose sealed version it is may go now.
  void Unreferenced(uint64_t gen);

  // Whether `inode` may be evicted now. `spared` (0: none) is the chunk the
  // current operation works on, which must not be evicted under it.
  bool Evictable(const Inode &inode, int64_t now_ns, uint64_t spared) const;
  // Evicts `inode` (and, under a policy that says so, the chunks extending
  // it); returns the bytes that went.
  uint64_t EvictChunk(const Scope &scope, Inode *inode, const char *reason, uint64_t spared);
  // Evicts in policy order until `bytes` went or nothing more may go.
  uint64_t EvictBytes(const Scope &scope, uint64_t bytes, const char *reason);
  // Evicts enough for an allocation of `bytes` to fit, or nothing (ENOSPC)
  // if it cannot: a request that cannot fit must not empty the cache.
  Status MakeRoom(const Scope &scope, uint64_t bytes, uint64_t spared);
  // Above the high watermark, evicts down to the low one.
  void EvictToLowWatermark(const Scope &scope);

  uint64_t evictions() const { return evictions_; }
  // The eviction counters of the stats.
  void FillStats(rpc::StatsReply *rep) const;

 private:
  Evictor(Watermarks watermarks, NamespaceTree *tree, SpaceManager *space);

  // The policy's next victim that may go; 0 if none. Parks the chunks it
  // passes, which may not go.
  uint64_t NextVictim(int64_t now_ns);
  // Holds the chunks a walk passed because they may not go.
  void HoldPassed(const std::vector<uint64_t> &passed, int64_t now_ns);
  // Takes `inode`, which may not go, out of the policy's order until
  // Changed or Unreferenced finds it may.
  void Hold(const Inode &inode, int64_t now_ns);
  // Forgets a held chunk; with `unpark`, returns it to its place.
  void Unhold(uint64_t ino, bool unpark);
  // Rechecks a held chunk; puts it back if it may go now.
  void Recheck(uint64_t ino, int64_t now_ns);
  // Puts back the held chunks whose pin expired by `now_ns`.
  void ReleaseExpiredPins(int64_t now_ns);
  // Victims covering `shortfall` bytes, chosen in one walk of the policy's
  // order; ENOSPC if they cannot.
  Result<std::unordered_set<uint64_t>> ChooseVictims(uint64_t shortfall, uint64_t spared);
  // The chunks extending `ino`, directly or not, that may go now.
  std::vector<uint64_t> EvictableDescendants(uint64_t ino, uint64_t spared) const;
  // Removes one chunk and counts it.
  uint64_t Evict(const Scope &scope, Inode *inode, const char *reason);
  // Pool use that eviction could win back (retired versions still being
  // read are not); frees retired versions nobody reads first.
  uint64_t ReclaimableUse(MetaDb::Batch *batch);

  Watermarks watermarks_;
  NamespaceTree &tree_;
  SpaceManager &space_;
  ChunkChains chains_;
  std::unique_ptr<EvictionPolicy> policy_;  // reads chains_
  uint64_t evictions_ = 0, evicted_bytes_ = 0;
  std::map<std::string, uint64_t> evictions_by_reason_;
  // The parked chunks, by ino and by generation (for Unreferenced), and
  // the deadlines of their pins. Only held chunks are here.
  struct Held {
    uint64_t gen;          // its sealed generation when parked
    int64_t pin_deadline;  // 0: none that will pass by itself
  };
  std::unordered_map<uint64_t, Held> held_;
  std::unordered_map<uint64_t, uint64_t> held_gens_;  // gen -> ino
  std::multimap<int64_t, uint64_t> pin_deadlines_;    // deadline -> ino
};

}  // namespace maru
