// Shared by maru-bench lookup and ops: the same operation timed through the
// shared-memory index and by message, side by side in one run.
#pragma once

#include <atomic>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "bench_common.h"

namespace maru::bench {

// A connection that uses the index (`index` true) or only messages
// (MARU_INDEX=0 while it connects); null on failure, with `error` set.
inline maru_t *ConnectPath(const std::string &server, bool index, int *error) {
  if (!index) setenv("MARU_INDEX", "0", 1);
  maru_t *m = nullptr;
  *error = maru_connect(server.c_str(), &m);
  if (!index) unsetenv("MARU_INDEX");
  return *error ? nullptr : m;
}

// Microseconds since `t0` (MonotonicNs).
inline double UsSince(int64_t t0) {
  return static_cast<double>(MonotonicNs() - t0) / 1000.0;
}

struct PathRun {
  double p50_us = 0, p99_us = 0, per_s = 0;
  bool failed = false;
};

// Runs `op` in `threads` threads for `seconds`. `op` returns the latency it
// measured in microseconds (what it times is its choice), negative if it failed.
inline PathRun TimeThreads(int threads, int64_t seconds, const std::function<double()> &op) {
  std::vector<std::vector<double>> lat(static_cast<size_t>(threads));
  std::atomic<bool> failed{false};
  const int64_t end = MonotonicNs() + seconds * 1000000000;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      while (MonotonicNs() < end) {
        const double us = op();
        if (us < 0) failed = true;
        lat[static_cast<size_t>(t)].push_back(us);
      }
    });
  for (auto &w : workers) w.join();
  std::vector<double> all;
  for (auto &l : lat) all.insert(all.end(), l.begin(), l.end());
  PathRun r;
  r.failed = failed;
  r.p50_us = Quantile(all, 0.5);
  r.p99_us = Quantile(all, 0.99);
  r.per_s = static_cast<double>(all.size()) / static_cast<double>(seconds);
  return r;
}

// "1,4,8" -> {1, 4, 8}; empty on a bad list.
inline std::vector<int> CountList(const std::string &list) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos < list.size()) {
    size_t comma = list.find(',', pos);
    int n = atoi(list.substr(pos, comma - pos).c_str());
    if (n <= 0) return {};
    out.push_back(n);
    pos = comma == std::string::npos ? list.size() : comma + 1;
  }
  return out;
}

}  // namespace maru::bench
