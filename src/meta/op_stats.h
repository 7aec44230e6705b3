// Per-operation counters and latency histograms, updated lock-free on every
// request and read by Stats (maructl stats, marutop) and /metrics.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "proto/maru.pb.h"

namespace maru {

class OpStats {
 public:
  static constexpr int kBuckets = 40;  // upper bounds grow by sqrt(2) from 1 us

  // Returns the slot for an operation name, creating it on first use.
  // Names are registered once at start; lookups after that are lock-free.
  int Register(const std::string &op);
  void Record(int slot, int64_t elapsed_ns, bool error);
  static std::vector<double> BucketBoundsUs();
  void Fill(rpc::StatsReply *rep) const;

 private:
  struct Slot {
    std::string name;
    std::atomic<uint64_t> count{0}, errors{0}, sum_ns{0};
    std::array<std::atomic<uint64_t>, kBuckets + 1> buckets{};
  };
  static constexpr int kMaxOps = 48;  // the RPCs (41), and room for a few counters
  std::array<Slot, kMaxOps> slots_;
  std::atomic<int> used_{0};
};

}  // namespace maru
