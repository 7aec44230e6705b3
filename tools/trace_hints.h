// Retention hints an engine would give, derived from a trace under a
// stated assumption, for the offline simulator ("POLICY:keep[+drop]
// [:miss-PCT][:wrong-PCT]" in maru-bench policies).
//
// The assumption: the engine knows whether the conversation a request
// belongs to is still open after it (it is until its last turn: SGLang's
// sessions, a chat front end's open tab). In the trace a request's
// conversation goes on when a later request holds its last full block
// (index n-2: the same id means the same tokens before it). After each
// request the engine hints every block of it: keep when it goes on,
// otherwise drop (with "+drop") or nothing. Degraded variants: each
// request's hint is missing (none) with probability miss, or wrong (keep
// and drop swapped; without "+drop", keep and none) with probability
// wrong, independently, by a hash of the request's index.
#pragma once

#include <string>
#include <vector>

#include "kv_trace.h"
#include "meta/eviction_policy.h"
#include "util/status.h"

namespace maru::bench {

struct HintModel {
  bool keep = false;  // hints at all
  bool drop = false;  // also drop on a conversation's last turn
  double missing = 0, wrong = 0;
};

// Splits "POLICY[:keep[+drop][:miss-P][:wrong-P]]" into the policy and its
// hints; EINVAL for a malformed suffix.
Result<std::pair<std::string, HintModel>> ParseHintedName(const std::string &name);

// The hint of each request of `trace` under `model` (kNone: none given).
std::vector<RetentionHint> TraceHints(const std::vector<TraceRequest> &trace,
                                      const HintModel &model);

}  // namespace maru::bench
