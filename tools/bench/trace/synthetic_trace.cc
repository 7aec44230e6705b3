#include "bench/trace/synthetic_trace.h"

#include <random>

namespace maru::bench {
namespace {

struct Generator {
  std::mt19937_64 rng{20261130};
  uint64_t next_block = 1;
  std::vector<std::vector<uint64_t>> live;  // conversations that may go on, newest last

  uint64_t Uniform(uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng); }
  void Fresh(std::vector<uint64_t> *blocks, uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) blocks->push_back(next_block++);
  }
};

// A turn: a new conversation (after `prefix`), or the next turn of a
// recent one, which reads its whole chain and adds a few blocks.
TraceRequest Turn(Generator &g, const std::vector<uint64_t> &prefix) {
  TraceRequest r;
  if (g.live.empty() || g.Chance(0.4)) {
    r.blocks = prefix;
    g.Fresh(&r.blocks, g.Uniform(2, 24));
    g.live.push_back(r.blocks);
  } else {
    // Recent conversations go on more often: the gap is spread over the
    // last few hundred.
    const size_t back =
        std::min<size_t>(g.live.size() - 1, g.Uniform(0, 1) ? g.Uniform(0, 60) : g.Uniform(0, 600));
    const size_t at = g.live.size() - 1 - back;
    r.blocks = g.live[at];
    g.Fresh(&r.blocks, g.Uniform(1, 6));
    g.live.erase(g.live.begin() + static_cast<ptrdiff_t>(at));
    if (g.Chance(0.7)) g.live.push_back(r.blocks);  // else the conversation ends
  }
  if (g.live.size() > 5000) g.live.erase(g.live.begin());
  return r;
}

}  // namespace

std::vector<std::string> SyntheticTraceNames() {
  return {"scan", "hot-prefix"};
}

Result<std::vector<TraceRequest>> SyntheticTrace(const std::string &name, size_t requests) {
  if (name != "scan" && name != "hot-prefix")
    return Status::Error(EINVAL, "unknown synthetic trace '" + name + "' (scan, hot-prefix)");
  Generator g;
  std::vector<std::vector<uint64_t>> prompts(3);
  for (auto &p : prompts) g.Fresh(&p, 8);
  std::vector<TraceRequest> out;
  while (out.size() < requests) {
    if (name == "scan" && g.Chance(1.0 / 3)) {
      TraceRequest r;
      g.Fresh(&r.blocks, g.Uniform(16, 64));
      out.push_back(std::move(r));
      continue;
    }
    static const std::vector<uint64_t> kNone;
    out.push_back(Turn(g, name == "hot-prefix" ? prompts[g.Uniform(0, 2)] : kNone));
  }
  return out;
}

}  // namespace maru::bench
