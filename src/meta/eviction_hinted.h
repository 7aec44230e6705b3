// `frequency` that also takes the client's retention hints ("hinted").
//
// Without hints it orders chunks exactly as FrequencyEviction does:
//   key = last use + 0.25 x held x log2(1 + reads) - 2 x depth
// least key first. A hint (maru_hint(), src/meta/hint_ops.cc) moves that
// key by a bounded amount and never takes a chunk out of the order:
//   keep: + kKeepWeight x held (the engine expects a reader: the chunk is
//         on a conversation that is still open), kept across reads until
//         the next hint;
//   drop: - held (no reader expected: the conversation ended), undone by
//         the next read (a chunk someone still reads was not done with,
//         e.g. a shared system prompt under an ended conversation).
// So a keep-hinted chunk nobody reads still goes after kKeepWeight + 1
// cache lifetimes of LRU at most, and hinting every chunk keep orders them
// as no hint does: a hint reorders, it cannot hold space. Between
// tenants a keep is worth what reading one's own chunks is already worth
// under `frequency` (a bounded head start, not a reservation); quotas, not
// hints, bound what one tenant holds. Hints are soft state: not persisted,
// gone at restart and with the chunk.
//
// Why: on the Mooncake conversation trace the offline optimum needs to
// know whether a block will be read again; the server can only guess it
// from reads (docs/benchmarks.md, "Eviction, third round and client
// hints"), while the engine knows whether a conversation is open.
// Per chunk: key, last use, reads, depth, hint (24 bytes); each use, hint
// and eviction is O(log n).
#pragma once

#include <cstdint>
#include <set>
#include <unordered_map>
#include <utility>

#include "meta/eviction_policy.h"

namespace maru {

class HintedEviction : public EvictionPolicy {
 public:
  explicit HintedEviction(const ChunkChains &chains) : chains_(chains) {}
  void OnInsert(uint64_t ino) override;
  void OnAccess(uint64_t ino) override;
  void OnRemove(uint64_t ino) override;
  void OnHint(uint64_t ino, RetentionHint hint) override;
  // Least key first.
  bool InOrder(const std::function<bool(uint64_t)> &visit) const override;
  void Park(uint64_t ino) override;
  void UnparkAll() override;
  void Unpark(uint64_t ino) override;
  void Reserve(size_t chunks) override { state_.reserve(chunks); }
  bool EvictsDescendants() const override { return false; }
  const char *name() const override { return "hinted"; }

  // The key of a chunk last used at `last`, read `reads` times, at
  // `depth`, hinted `hint`, with `held` chunks held.
  static int64_t Key(uint64_t last, uint32_t reads, uint32_t depth, RetentionHint hint,
                     size_t held);
  // Held chunks a keep hint adds to the key. Offline on the Mooncake trace
  // with hints from "the engine knows a conversation is open"
  // (docs/benchmarks.md): 2 wins more with right hints (0.3451 at 9 %
  // against 0.3370) but with 30 % of them wrong falls below LRU at 18 %;
  // 1 stays above it there, 0.5 wins less everywhere.
  static constexpr double kKeepWeight = 1.0;
  static constexpr uint32_t kMaxDepth = 1 << 20;

 private:
  struct State {
    int64_t key;
    uint64_t last;
    uint32_t reads;
    uint32_t depth : 30;
    uint32_t hint : 2;
  };
  // Computes the key again and puts the chunk back in the order.
  void Place(uint64_t ino, State *s);

  const ChunkChains &chains_;
  uint64_t clock_ = 0;
  std::unordered_map<uint64_t, State> state_;
  std::set<std::pair<int64_t, uint64_t>> order_;  // (key, ino), least first
  std::unordered_map<uint64_t, int64_t> parked_;  // ino -> key, taken out of order_
};

}  // namespace maru
