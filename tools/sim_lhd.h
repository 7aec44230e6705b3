// Third-round offline candidate "lhd[-K]": Least Hit Density (Beckmann,
// Chen, Cidon, "LHD: Improving Cache Hit Rate by Maximizing Hit Density",
// NSDI'18), learned online, over the classes of sim_run_class.h. A block's
// value is the expected hits per unit of cache time it will still take,
// estimated per class and per age (time since its last use) from the
// ages at which blocks of its class were read or evicted; the victim is
// the block of least value among K sampled at random (64 by default);
// with `leaves` ("lhd-tree"), a block no cached block extends, if one was
// sampled (a prefix evicted under its tail makes the tail useless).
#pragma once

#include <cstdint>
#include <memory>

#include "policy_sim.h"

namespace maru::bench {

std::unique_ptr<SimPolicy> MakeLhdPolicy(uint64_t capacity, uint32_t samples, bool leaves);

}  // namespace maru::bench
