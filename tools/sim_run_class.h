// Third-round offline candidate (maru-bench policies "run-class[-W]"): the
// frequency policy whose bonus is a reuse probability learned online per
// class of block, where the class is what the server sees of how a block
// was stored: its reads so far (0, 1, 2+), whether the run of blocks it
// was stored in extends a chain that was already deep (a later turn of a
// conversation) or starts one (a first turn), how long that run is, and
// whether the block is the run's last (a partial block the next turn
// diverges at). See docs/benchmarks.md, "Eviction, third round".
#pragma once

#include <cstdint>
#include <memory>

#include "policy_sim.h"

namespace maru::bench {

// `weight`: chunks held per doubling of the class's reuse odds against the
// mean; `floor`: the least log2 of that ratio counted (0: classes below
// the mean are not pushed ahead of LRU's order).
std::unique_ptr<SimPolicy> MakeRunClassPolicy(uint64_t capacity, double weight, double floor);

}  // namespace maru::bench
