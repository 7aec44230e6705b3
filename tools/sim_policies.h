// Eviction policies tried offline only (maru-bench policies), against the
// server's own: generic caches (SIEVE, S3-FIFO, a 2Q-like segmented LRU,
// LFU with dynamic aging, GreedyDual-Size-Frequency) and variants that read
// the prefix tree (leaves first, recompute cost by depth, frequency bonus).
// See docs/benchmarks.md, "Eviction policies", for what each does and
// where it comes from.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "policy_sim.h"

namespace maru::bench {

std::vector<std::string> CandidatePolicyNames();
// EINVAL naming every policy for a name it does not know.
Result<std::unique_ptr<SimPolicy>> MakeCandidatePolicy(const std::string &name,
                                                       const ChunkChains &chains,
                                                       uint64_t capacity);

// "reuse-oracle[-fp|-fn][-PCT]": knows from `trace` whether each block will
// be referenced again (not when), but says "again" of a block that will
// not be with probability `false_positive` (-fp), "not again" of one that
// will with `false_negative` (-fn), both without either; an offline
// ceiling, named by SimulatePolicy only.
std::unique_ptr<SimPolicy> MakeReuseOracle(const std::vector<TraceRequest> &trace,
                                           double false_positive, double false_negative);

}  // namespace maru::bench
