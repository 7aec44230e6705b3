// Synthetic KV-cache traces for trying eviction policies beyond the one
// production trace: multi-turn conversations (each turn extends the chain
// of the one before by a few blocks), plus one of two stresses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/trace/kv_trace.h"
#include "util/status.h"

namespace maru::bench {

// "scan": a third of the requests are one-off prompts of 16 to 64 blocks
// nobody reads again. "hot-prefix": every conversation starts with one of
// three shared system prompts of 8 blocks. Deterministic for a name and
// request count; EINVAL for an unknown name.
Result<std::vector<TraceRequest>> SyntheticTrace(const std::string &name, size_t requests);
std::vector<std::string> SyntheticTraceNames();

}  // namespace maru::bench
