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

}  // namespace maru::bench
