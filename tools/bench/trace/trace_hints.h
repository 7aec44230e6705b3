// Retention hints an engine would give, derived from a trace under a
// stated assumption, for the offline simulator and the live replay
// ("POLICY:keep[+drop][:late-N][:miss-PCT][:wrong-PCT]" in maru-bench
// policies, "--hints keep+drop[:late-N]..." in maru-bench replay).
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
//
// "late-N" drops the oracle's timing: the engine learns that a
// conversation ended only N requests after its last turn (a user closing
// the chat, an agent finishing its task), so every turn is hinted keep
// when it is served (its conversation is open then) and the last turn's
// blocks are hinted drop after request i + N. late-0 is keep+drop.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "bench/trace/kv_trace.h"
#include "meta/eviction_policy.h"
#include "util/status.h"

namespace maru::bench {

struct HintModel {
  bool keep = false;  // hints at all
  bool drop = false;  // also drop on a conversation's last turn
  size_t late = 0;    // the drop comes this many requests after that turn
  double missing = 0, wrong = 0;
};

// One hint the engine gives: on every block of request `request`.
struct HintEvent {
  size_t request;
  RetentionHint hint;
};

// Splits "POLICY[:keep[+drop][:late-N][:miss-P][:wrong-P]]" into the
// policy and its hints; EINVAL for a malformed suffix.
Result<std::pair<std::string, HintModel>> ParseHintedName(const std::string &name);

// The hints `model` gives after each request of `trace`: entry r lists
// those given once request r is served (empty without hints).
std::vector<std::vector<HintEvent>> TraceHints(const std::vector<TraceRequest> &trace,
                                               const HintModel &model);

}  // namespace maru::bench
