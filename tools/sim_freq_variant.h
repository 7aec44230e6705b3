// Offline only (maru-bench policies "fv[/PARAM VALUE...]"): frequency's key
// with its parts as parameters, for sweeps; "fv" alone is the fixed-weight
// `frequency` of before issue 15's fourth round, to the digit. Parameters:
//   w: the bonus's weight (0.25); d: the depth term's factor (2);
//   k: a block stored right after its parent was read (a short run
//      extending a read chain) takes the parent's reads, for runs of up
//      to k blocks (0: never); c: at most c of them; r: "right after" is
//      within r ticks (1);
//   a1: learn the weight as `frequency` does now (p_read / p_unread):
//      m: margin (0.2), x: most scale (1), q: quick reads (0.125 x held),
//      s: scale before any evidence (1; the server's is 0), e: evidence (64).
// See docs/benchmarks.md, "Eviction, fourth round".
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "policy_sim.h"

namespace maru::bench {

struct FrequencyVariantParams {
  double weight = 0.25;
  double depth_factor = 2;
  uint64_t inherit_run = 0;  // 0: none
  uint64_t inherit_cap = 1u << 30;
  uint64_t recent = 1;  // parent read within this many ticks
  bool adapt = false;
  double margin = 0.2, max_scale = 1, quick = 0.125, start = 1, evidence = 64;
};

bool ParseFrequencyVariant(const std::string &name, FrequencyVariantParams *p);
std::unique_ptr<SimPolicy> MakeFrequencyVariant(const FrequencyVariantParams &p);

}  // namespace maru::bench
