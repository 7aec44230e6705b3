// KV-cache request traces in the Mooncake format (one JSON object a line,
// with "timestamp" and "hash_ids": the request's 512-token prefix blocks in
// order), and offline simulations of a block cache serving them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace maru::bench {

struct TraceRequest {
  int64_t timestamp_ms = 0;
  uint64_t input_tokens = 0;   // the prompt's tokens ("input_length"; 0: not given)
  uint64_t output_tokens = 0;  // tokens generated ("output_length"; 0: not given)
  std::vector<uint64_t> blocks;
};

// Reads a trace; `limit` > 0 keeps the first `limit` requests. A line that
// is not such an object is an error naming the file and the line number.
Result<std::vector<TraceRequest>> ReadTrace(const std::string &path, size_t limit = 0);

struct SimResult {
  uint64_t blocks = 0;  // block references
  uint64_t hits = 0;    // references served from the cache
  double hit_ratio() const {
    return blocks ? static_cast<double>(hits) / static_cast<double>(blocks) : 0;
  }
};

// Serves the trace as the live replay does: a request hits the longest
// cached prefix of its blocks (a block past the first miss is useless);
// the blocks after that prefix are then stored, evicting to make room.
// `capacity` is in blocks.
SimResult SimulateLru(const std::vector<TraceRequest> &trace, uint64_t capacity);
// The same, evicting the block whose next use lies farthest in the future
// (Belady's MIN), the offline optimum for this stream of references.
SimResult SimulateBelady(const std::vector<TraceRequest> &trace, uint64_t capacity);

}  // namespace maru::bench
