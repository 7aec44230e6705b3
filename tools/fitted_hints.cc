#include "fitted_hints.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

namespace maru::bench {
namespace {

// What the server knows of request i when it is served.
struct Observed {
  uint64_t turn = 0;       // requests before it in its conversation
  uint64_t stored = 0;     // blocks past the longest prefix seen before
  int64_t gap_class = -1;  // log2 of the seconds since the turn before; -1: a first turn
  uint64_t prompt_blocks = 0, output_tokens = 0;
};

// A request's turn before it is the request that stored the deepest block
// of its already-seen prefix, when that prefix covers all of that request
// but its (partial) last block: it extends that request's conversation
// rather than branching off a shared prompt.
std::vector<Observed> Observe(const std::vector<TraceRequest> &trace) {
  std::vector<Observed> out(trace.size());
  std::unordered_map<uint64_t, size_t> stored_by;
  for (size_t i = 0; i < trace.size(); ++i) {
    const std::vector<uint64_t> &b = trace[i].blocks;
    size_t seen = 0;
    while (seen < b.size() && stored_by.count(b[seen])) ++seen;
    Observed &o = out[i];
    o.stored = b.size() - seen;
    o.prompt_blocks = b.size();
    o.output_tokens = trace[i].output_tokens;
    if (seen >= 2) {
      const size_t before = stored_by[b[seen - 1]];
      if (seen + 1 >= trace[before].blocks.size()) {
        o.turn = out[before].turn + 1;
        const double s =
            static_cast<double>(trace[i].timestamp_ms - trace[before].timestamp_ms) / 1000;
        o.gap_class = std::min<int64_t>(static_cast<int64_t>(std::log2(std::max(s, 16.0))) - 4, 6);
      }
    }
    for (size_t j = seen; j < b.size(); ++j) stored_by.emplace(b[j], i);
  }
  return out;
}

uint64_t ClassOf(const Observed &o, FeatureClasses classes) {
  const uint64_t turn = std::min<uint64_t>(o.turn, 5);
  const uint64_t gap = static_cast<uint64_t>(o.gap_class + 1);  // 0..7
  if (classes == FeatureClasses::kCoarse) {
    const uint64_t stored = o.stored <= 4 ? 0 : o.stored <= 16 ? 1 : o.stored <= 32 ? 2 : 3;
    const uint64_t length = std::min<uint64_t>(o.prompt_blocks / 16, 4);
    return ((turn * 4 + stored) * 8 + gap) * 5 + length;
  }
  const uint64_t stored = std::min<uint64_t>(o.stored, 40);
  const uint64_t length = std::min<uint64_t>(o.prompt_blocks / 4, 255);
  const uint64_t output = std::min<uint64_t>(o.output_tokens / 100, 255);
  return ((((turn * 41 + stored) * 8 + gap) * 256 + length) << 8) + output;
}

}  // namespace

std::vector<bool> ConversationGoesOn(const std::vector<TraceRequest> &trace) {
  std::vector<bool> goes_on(trace.size(), false);
  std::unordered_set<uint64_t> later;  // blocks some later request holds
  for (size_t i = trace.size(); i-- > 0;) {
    const std::vector<uint64_t> &b = trace[i].blocks;
    goes_on[i] = b.size() >= 2 && later.count(b[b.size() - 2]) > 0;
    later.insert(b.begin(), b.end());
  }
  return goes_on;
}

std::vector<RetentionHint> FittedHints(const std::vector<TraceRequest> &trace,
                                       FeatureClasses classes) {
  const std::vector<bool> goes_on = ConversationGoesOn(trace);
  const std::vector<Observed> observed = Observe(trace);
  struct Count {
    double requests = 0, went_on = 0;
  };
  std::unordered_map<uint64_t, Count> by_class;
  double went_on = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    Count &c = by_class[ClassOf(observed[i], classes)];
    ++c.requests;
    c.went_on += goes_on[i];
    went_on += goes_on[i];
  }
  const double mean = trace.empty() ? 0 : went_on / static_cast<double>(trace.size());
  std::vector<RetentionHint> hints(trace.size(), RetentionHint::kNone);
  for (size_t i = 0; i < trace.size(); ++i) {
    if (trace[i].blocks.size() < 2) continue;
    // The class's rate over the other requests of the trace (leave one
    // out: a class of one request must not tell its own future), shrunk
    // toward the mean by four requests' worth.
    const Count &c = by_class[ClassOf(observed[i], classes)];
    const double rate = (c.went_on - goes_on[i] + 4 * mean) / (c.requests - 1 + 4);
    if (rate >= kKeepAbove * mean) hints[i] = RetentionHint::kKeep;
    if (rate < kDropBelow * mean) hints[i] = RetentionHint::kDrop;
  }
  return hints;
}

}  // namespace maru::bench
