// Frequency-weighted LRU over the prefix tree ("frequency", the default).
//
// A chunk's place is its last use pushed later by how often it was read:
//   key = last use + kWeight x held chunks x log2(1 + reads) - 2 x depth
// and the least key goes first (a use is a tick of the clock). In the
// Mooncake conversation trace a block read again is read again more often
// than a block just stored is read at all (a conversation that came back
// is likelier to come back again: 0.42 to 0.6 against 0.32), so a block
// read once stays a quarter of a cache's worth of uses longer than plain
// LRU keeps it, one read three times half of one longer, less with every
// read (log2): one-off prompts and ended conversations go first, while a
// hot shared prefix cannot hold the cache forever, its bonus being fixed
// when it was last read. The scale is the number of chunks held, so the policy
// needs no capacity and the bonus is in the units the clock runs in (one
// tick a use). `- 2 x depth` (depth: chunks before it in its chain) puts a
// chain's tail before its prefix when they were used in one pass (a prefix
// is read front to back, a tick apart), so a prefix is not evicted from
// under the chains extending it; it does not reach across passes.
//
// Per chunk it keeps its key, reads and depth (16 bytes, in a flat table)
// and its place in the order (sorted runs); each use and each eviction is
// O(log n). See docs/benchmarks.md,
// "Eviction policies", for the policies tried and the figures.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "meta/eviction_policy.h"
#include "util/flat_map.h"
#include "util/sorted_runs.h"

namespace maru {

class FrequencyEviction : public EvictionPolicy {
 public:
  explicit FrequencyEviction(const ChunkChains &chains) : chains_(chains) {}
  void OnInsert(uint64_t ino) override;
  void OnAccess(uint64_t ino) override;
  void OnRemove(uint64_t ino) override;
  // Least key first.
  bool InOrder(const std::function<bool(uint64_t)> &visit) const override;
  void Park(uint64_t ino) override;
  void UnparkAll() override;
  void Unpark(uint64_t ino) override;
  void Reserve(size_t chunks) override { state_.reserve(chunks); }
  bool EvictsDescendants() const override { return false; }
  const char *name() const override { return "frequency"; }

  // The key of a use at `clock` of a chunk read `reads` times at `depth`,
  // with `held` chunks held and the bonus weighted by `weight`.
  static int64_t Key(uint64_t clock, uint32_t reads, uint32_t depth, size_t held, double weight);
  // The bonus's weight: a quarter of the chunks held per doubling of the
  // reads. Tried offline (docs/benchmarks.md): 0.5 and 1 win more on the
  // Mooncake trace at 4.5 and 9 % of its blocks but lose to LRU at 18 %,
  // and on a synthetic trace where conversations go on whatever their
  // length; 0.25 wins at all three capacities of the trace.
  static constexpr double kWeight = 0.25;
  // Chains set by hand may loop: re-parenting round one must not count up.
  static constexpr uint32_t kMaxDepth = 1 << 20;

 private:
  struct State {
    int64_t key = 0;
    uint32_t reads = 0;
    uint32_t depth = 0;
  };
  void Use(uint64_t ino, State *s);

  const ChunkChains &chains_;
  uint64_t clock_ = 0;
  FlatMap<State> state_;
  SortedRuns<std::pair<int64_t, uint64_t>> order_;  // (key, ino), least first
  std::unordered_map<uint64_t, int64_t> parked_;    // ino -> key, taken out of order_
};

}  // namespace maru
