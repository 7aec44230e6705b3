// Offline simulation of eviction policies over a KV-cache trace, block by
// block in the order the live replay (maru-bench replay, one client) runs
// it: a request's longest cached prefix is read front to back, then each
// missing block is stored as the child of its predecessor, evicting one
// block first when the cache is full (while that predecessor is a sealed
// chunk nothing extends yet, as it is live).
//
// The policy is one of the server's EvictionPolicy classes, driven as the
// Evictor drives it, so the offline figure is what the server would do.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/trace/kv_trace.h"
#include "meta/eviction_policy.h"
#include "util/status.h"

namespace maru::bench {

// What recomputing a token's KV costs, in FLOPs: a constant for the
// weights it passes (projections and MLP, 2 FLOPs per weight and layer)
// plus attention over the tokens before it, linear in its position.
struct RecomputeCost {
  double per_token;                                     // FLOPs of the weights
  double per_position;                                  // FLOPs per earlier token attended to
  double Tokens(uint64_t first, uint64_t count) const;  // positions [first, first+count)
};
// Llama-3.1-8B: 32 layers, d 4096, 8 KV heads of 128, MLP 14336.
RecomputeCost Llama8BCost();

struct PolicyFigures {
  uint64_t blocks = 0, hits = 0;        // block references, served from cache
  uint64_t tokens = 0, token_hits = 0;  // prompt tokens, served from cache
  double flops = 0, flops_saved = 0;    // recompute FLOPs of all prompts, saved
  double block_hit() const { return Ratio(hits, blocks); }
  double token_hit() const { return Ratio(token_hits, tokens); }
  double saved() const { return flops > 0 ? flops_saved / flops : 0; }
  static double Ratio(uint64_t a, uint64_t b) {
    return b ? static_cast<double>(a) / static_cast<double>(b) : 0;
  }
};

// Serves `trace` from a cache of `capacity` blocks under the server's
// policy `name` (EvictionPolicyNames); "NAME:keep[+drop][:late-N]
// [:miss-P][:wrong-P]" also gives it the hints of trace_hints.h after each
// request. Blocks are named by their trace id + 1, so that 0 means none.
Result<PolicyFigures> SimulatePolicy(const std::vector<TraceRequest> &trace, uint64_t capacity,
                                     const std::string &name, const RecomputeCost &cost);

}  // namespace maru::bench
