// A bound on eviction by the server alone: retention hints from the best
// guess, at each request, of whether its conversation goes on that the
// features a server can observe allow, with each feature class's rate of
// going on fitted on the trace itself.
//
// The server sees, of a request: the chain it extends (so its turn: how
// many requests stored the chain before it), how many chunks it stored,
// how long since the turn before it, and how long the prompt is. What it
// cannot see is whether the user will come back. This predictor knows
// each class's rate of coming back over all the other requests of the
// trace it runs on (leave one out, so a class of one request does not
// tell its own future; past and future alike, so no online learner knows
// the rates better), and hints keep when the class comes back at least
// kKeepAbove x the mean rate, drop when under kDropBelow x the mean, none
// between. The server's policy then orders as it does with any engine's
// hints. What that reaches is about as far as a policy of the server's own
// can get on these features: measured, not argued (docs/benchmarks.md).
// The thresholds are the best of a sweep on the conversation trace (1.0 to
// 2.0 and 0 to 1.0: all within 0.004 at 9 %).
#pragma once

#include <vector>

#include "kv_trace.h"
#include "meta/eviction_policy.h"

namespace maru::bench {

enum class FeatureClasses {
  kCoarse,  // turn (0..5+), chunks stored (4 classes), time since the turn
            // before (log2 s, 8 classes), prompt length (5 classes)
  kFine,    // turn, chunks stored (0..40+), time since the turn before,
            // prompt length (4-block classes), tokens generated (100s:
            // the server sees them only if the engine stores their KV)
};

constexpr double kKeepAbove = 1.1, kDropBelow = 0.9;

// Whether a later request extends request i's conversation: holds its
// last full block (index n-2: the same id means the same tokens before it).
std::vector<bool> ConversationGoesOn(const std::vector<TraceRequest> &trace);

// The hint for each request of `trace` (kNone for a request of one block).
std::vector<RetentionHint> FittedHints(const std::vector<TraceRequest> &trace,
                                       FeatureClasses classes);

}  // namespace maru::bench
