// Offline simulation of eviction policies over a KV-cache trace, block by
// block in the order the live replay (maru-bench replay, one client) runs
// it: a request's longest cached prefix is read front to back, then each
// missing block is stored as the child of its predecessor, evicting one
// block first when the cache is full (while that predecessor is a sealed
// chunk nothing extends yet, as it is live).
//
// A policy is either one of the server's EvictionPolicy classes, driven as
// the Evictor drives it (so the offline figure is what the server would
// do), or one of the offline-only candidates of sim_policies.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kv_trace.h"
#include "meta/chunk_chains.h"
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

// Blocks are named by their trace id + 1, so that 0 means none.
class SimPolicy {
 public:
  virtual ~SimPolicy() = default;
  virtual void Hit(uint64_t block) = 0;
  // A block was stored; `parent` (0: none) is cached and it extends it.
  virtual void Insert(uint64_t block, uint64_t parent) = 0;
  // The next block to evict (the simulator then calls Erase on it, and on
  // every cached block extending it when Cascades()).
  virtual uint64_t Victim() = 0;
  virtual void Erase(uint64_t block) = 0;
  // Whether evicting a block also evicts the blocks extending it.
  virtual bool Cascades() const = 0;
  // A client's retention hint on a cached block (trace_hints.h); ignored
  // by policies that take none.
  virtual void Hint(uint64_t block, RetentionHint hint) {
    (void)block;
    (void)hint;
  }
};

// The policies the simulator knows: the server's ("lru", "prefix", ...)
// and the offline-only candidates. `chains` is the simulator's view of
// which cached block extends which; it outlives the policy.
std::vector<std::string> SimPolicyNames();
Result<std::unique_ptr<SimPolicy>> MakeSimPolicy(const std::string &name, const ChunkChains &chains,
                                                 uint64_t capacity);

// Serves `trace` from a cache of `capacity` blocks under policy `name`;
// "NAME:keep[+drop][:miss-P][:wrong-P]" also gives it the hints of
// trace_hints.h after each request.
Result<PolicyFigures> SimulatePolicy(const std::vector<TraceRequest> &trace, uint64_t capacity,
                                     const std::string &name, const RecomputeCost &cost);

}  // namespace maru::bench
