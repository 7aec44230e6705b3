// Frequency-weighted LRU over the prefix tree, moved by the clients'
// retention hints ("frequency", the default; "hinted" is the same policy).
//
// A chunk's place is its last use pushed later by how often it was read:
//   key = last use + w x held chunks x log2(1 + reads) - 2 x depth + hint
// and the least key goes first (a use is a tick of the clock). In the
// Mooncake conversation trace a block read again is read again more often
// than a block just stored is read at all (a conversation that came back
// is likelier to come back again: 0.42 to 0.6 against 0.32), so there a
// block read once stays a quarter of a cache's worth of uses longer than
// plain LRU keeps it (w = kWeight), one read three times half of one
// longer, less with every read (log2): one-off prompts and ended
// conversations go first, while a hot shared prefix cannot hold the cache
// forever, its bonus being fixed when it was last read. The scale is the
// number of chunks held, so the policy needs no capacity and the bonus is
// in the units the clock runs in (one tick a use).
//
// That bet is not true of every workload: where conversations go on or
// end whatever their past (the synthetic `hot-prefix` trace), a block read
// before is *less* likely to be read again than one just stored, and a
// fixed bonus loses to LRU (0.996x at 18 %). So w is learned: the policy
// counts, for chunks never read and chunks read, how many of their uses
// were followed by a read (one that came late enough for the order to
// have mattered: at least kQuick x held ticks after the use) and how many
// by the chunk going, and w = kWeight x clamp((p_read / p_unread - 1) /
// kMargin, 0, 1). It starts at 0 (LRU's order) and stays there until
// kEvidence chunks went; the counts are halved when they reach twice the
// chunks held, so they follow the workload. Measured offline (docs/
// benchmarks.md, "Eviction, fourth round"): >= LRU on every trace and
// capacity of the simulator's matrix, within 0.0006 of the fixed bonus on
// the conversation trace.
//
// `- 2 x depth` (depth: chunks before it in its chain) puts a chain's tail
// before its prefix when they were used in one pass (a prefix is read
// front to back, a tick apart), so a prefix is not evicted from under the
// chains extending it.
//
// `hint` is the client's retention hint (maru_hint(), engine_hints.cc), a
// bounded move that never takes a chunk out of the order:
//   keep: + kKeepWeight x held (the engine expects a reader: its
//         conversation is still open), kept across reads until the next hint;
//   drop: - held (no reader expected: the conversation ended), undone by
//         the next read (someone still reads it), and refused by a chunk
//         that a live chain extends: one being written, or read and not
//         dropped, or more than kDropFanout chains. A conversation's chain,
//         hinted tail first (engine_hints.cc), is dropped up to where it
//         branches off a shared prefix (a system prompt), which keeps its
//         place: one conversation's end says nothing of the others'.
//         Branches never read (a turn's tail the next turn re-rendered) do
//         not stop it. Without the rule a drop that comes late (after the
//         other chains' keeps) pushes the hot prefix out from under
//         everyone: 0.90x LRU at 4.5 % of the synthetic hot-prefix trace.
// A keep-hinted chunk nobody reads still goes after about kKeepWeight + 1
// cache lifetimes of LRU, and hinting every chunk keep orders them as no
// hint does: a hint reorders, it cannot hold space; between tenants it is
// a bounded head start, not a reservation (quotas bound what one holds).
// A hint is not a use: it moves the key by the difference of the two
// hints' offsets at the chunks held then. Hints are soft state: not
// persisted, gone at restart and with the chunk. Without hints the order
// is the frequency order alone.
//
// Per chunk: key, last use (32 bits), reads (16, saturating), depth (14,
// saturating) and hint: 16 bytes in a flat table, and its place in the
// order (sorted runs); each use, hint and eviction is O(log n).
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
  void OnHint(uint64_t ino, RetentionHint hint) override;
  // Least key first.
  bool InOrder(const std::function<bool(uint64_t)> &visit) const override;
  void Park(uint64_t ino) override;
  void UnparkAll() override;
  void Unpark(uint64_t ino) override;
  void Reserve(size_t chunks) override { state_.reserve(chunks); }
  bool EvictsDescendants() const override { return false; }
  const char *name() const override { return "frequency"; }

  // What the policy learned: of the uses of chunks never read (0) and read
  // (1), how many a read followed (late enough to count) and how many the
  // chunk going.
  struct Evidence {
    uint64_t reread[2] = {0, 0};
    uint64_t gone[2] = {0, 0};
    // A use of a chunk read `reads` times before was followed by a read
    // `age` ticks later, with `held` chunks held.
    void Reread(uint32_t reads, uint64_t age, size_t held);
    // A chunk read `reads` times went, leaving `held` chunks held.
    void Gone(uint32_t reads, size_t held);
    // The bonus's weight this evidence gives.
    double Weight() const;

   private:
    void Decay(size_t held);
  };

  // The key of a use at `clock` of a chunk read `reads` times at `depth`,
  // hinted `hint`, with `held` chunks held and the bonus weighted by `weight`.
  static int64_t Key(uint64_t clock, uint32_t reads, uint32_t depth, RetentionHint hint,
                     size_t held, double weight);
  // What `hint` adds to the key with `held` chunks held.
  static int64_t HintOffset(RetentionHint hint, size_t held);

  // The most the bonus's weight reaches: a quarter of the chunks held per
  // doubling of the reads. Tried offline (docs/benchmarks.md): 0.5 and 1
  // win more on the Mooncake trace at 4.5 and 9 % of its blocks but lose to
  // LRU at 18 %; 0.25 wins at all three capacities of the trace.
  static constexpr double kWeight = 0.25;
  // Read chunks reread this much likelier than unread ones get all of it.
  static constexpr double kMargin = 0.2;
  // A read sooner than this x held ticks after the use it follows is not
  // evidence: any order keeps a chunk that long (a hot prefix, the rest of
  // one request).
  static constexpr double kQuick = 0.125;
  // Chunks that must go before the weight leaves 0.
  static constexpr uint64_t kEvidence = 64;
  // Held chunks a keep hint adds to the key. Offline on the Mooncake trace
  // with hints from "the engine knows a conversation is open"
  // (docs/benchmarks.md): 2 wins more with right hints (0.3451 at 9 %
  // against 0.3370) but with 30 % of them wrong falls below LRU at 18 %;
  // 1 stays above it there, 0.5 wins less everywhere.
  static constexpr double kKeepWeight = 1.0;
  // A chunk extended by more chains than this is a shared prefix: it never
  // takes a drop (and checking its extensions stays O(1)).
  static constexpr size_t kDropFanout = 4;
  // Saturation of the per-chunk counts (they are 16 and 14 bits). Depth
  // only orders one pass over a chain; reads beyond 65535 add < 1 % to a
  // bonus that is already the largest.
  static constexpr uint32_t kMaxReads = (1u << 16) - 1;
  static constexpr uint32_t kMaxDepth = (1u << 14) - 1;

  const Evidence &evidence() const { return evidence_; }

 private:
  struct State {
    int64_t key;
    uint32_t last;  // the tick of the last use, modulo 2^32
    uint16_t reads;
    uint16_t depth : 14;
    uint16_t hint : 2;
  };
  static_assert(sizeof(State) == 16, "per-chunk state grew");
  void Use(uint64_t ino, State *s);
  // True if a chain other readers may still need extends `ino`: a chunk
  // being written, or one read and not dropped, or more than kDropFanout.
  bool ExtendedByLiveChain(uint64_t ino) const;

  const ChunkChains &chains_;
  uint64_t clock_ = 0;
  Evidence evidence_;
  FlatMap<State> state_;
  SortedRuns<std::pair<int64_t, uint64_t>> order_;  // (key, ino), least first
  std::unordered_map<uint64_t, int64_t> parked_;    // ino -> key, taken out of order_
};

}  // namespace maru
