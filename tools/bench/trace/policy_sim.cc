#include "bench/trace/policy_sim.h"

#include <unordered_set>

#include "bench/trace/trace_hints.h"
#include "meta/eviction_policy.h"

namespace maru::bench {
namespace {

constexpr uint64_t kTokensPerBlock = 512;

// Tokens of block `i` of `req`: 512, but the last block of a prompt holds
// what is left of it.
uint64_t BlockTokens(const TraceRequest &req, size_t i) {
  if (req.input_tokens == 0) return kTokensPerBlock;
  const uint64_t start = i * kTokensPerBlock;
  if (req.input_tokens <= start) return 1;
  return std::min(kTokensPerBlock, req.input_tokens - start);
}

}  // namespace

double RecomputeCost::Tokens(uint64_t first, uint64_t count) const {
  // Sum of positions first .. first+count-1.
  const double n = static_cast<double>(count), f = static_cast<double>(first);
  return n * per_token + per_position * (n * f + n * (n - 1) / 2);
}

RecomputeCost Llama8BCost() {
  const double layers = 32, d = 4096, kv = 8 * 128, mlp = 14336;
  const double weights = d * (d + 2 * kv) + d * d + 3 * d * mlp;  // QKV, O, gate/up/down
  // Per earlier token: QK^T and the weighted sum of V, over all 32 heads.
  return RecomputeCost{2 * weights * layers, 4 * d * layers};
}

Result<PolicyFigures> SimulatePolicy(const std::vector<TraceRequest> &trace, uint64_t capacity,
                                     const std::string &hinted_name, const RecomputeCost &cost) {
  Result<std::pair<std::string, HintModel>> parsed = ParseHintedName(hinted_name);
  if (!parsed.ok()) return parsed.status();
  const std::string &name = parsed->first;
  const std::vector<std::vector<HintEvent>> hints = TraceHints(trace, parsed->second);
  ChunkChains chains;
  Result<std::unique_ptr<EvictionPolicy>> made = MakeEvictionPolicy(name, chains);
  if (!made.ok()) return made.status();
  // Told what the Evictor tells it: reads, seals (after the chains know the
  // parent), removals (before the chains forget the chunk). Its victim is
  // the first chunk of its order: with one client nothing is pinned,
  // leased or being written while it chooses.
  EvictionPolicy &policy = **made;
  std::unordered_set<uint64_t> cached;
  auto evict = [&](uint64_t victim) {
    std::vector<uint64_t> gone{victim};
    if (policy.EvictsDescendants())
      chains.ForEachDescendant(victim, [&](uint64_t d) {
        if (cached.count(d)) gone.push_back(d);
      });
    for (uint64_t b : gone) {
      policy.OnRemove(b);
      chains.Remove(b);
      cached.erase(b);
    }
  };
  PolicyFigures f;
  for (size_t r = 0; r < trace.size(); ++r) {
    const TraceRequest &req = trace[r];
    const size_t n = req.blocks.size();
    size_t hits = 0;
    while (hits < n && cached.count(req.blocks[hits] + 1)) ++hits;
    uint64_t position = 0;
    for (size_t j = 0; j < n; ++j) {
      const uint64_t tokens = BlockTokens(req, j);
      const double flops = cost.Tokens(position, tokens);
      position += tokens;
      f.tokens += tokens;
      f.flops += flops;
      if (j < hits) {
        f.token_hits += tokens;
        f.flops_saved += flops;
      }
    }
    f.blocks += n;
    f.hits += hits;
    for (size_t j = 0; j < hits; ++j) policy.OnAccess(req.blocks[j] + 1);
    for (size_t j = hits; j < n && capacity > 0; ++j) {
      const uint64_t b = req.blocks[j] + 1;
      if (cached.count(b)) continue;  // stored already: left as it is
      if (cached.size() >= capacity) {
        const uint64_t victim = policy.Victim([](uint64_t) { return true; });
        if (!victim || !cached.count(victim))
          return Status::Error(EIO, name + " chose no cached block to evict");
        evict(victim);
      }
      // Its predecessor may have gone to make room: then it extends nothing.
      const uint64_t parent =
          j > 0 && cached.count(req.blocks[j - 1] + 1) ? req.blocks[j - 1] + 1 : 0;
      if (parent) chains.SetParent(b, parent);
      cached.insert(b);
      policy.OnInsert(b);
    }
    // The engine's hints, once the request is served, on the blocks held,
    // last first as the server applies a batch (hint_ops.cc).
    for (const HintEvent &e : hints[r]) {
      const std::vector<uint64_t> &blocks = trace[e.request].blocks;
      for (auto id = blocks.rbegin(); id != blocks.rend(); ++id)
        if (cached.count(*id + 1)) policy.OnHint(*id + 1, e.hint);
    }
  }
  return f;
}

}  // namespace maru::bench
