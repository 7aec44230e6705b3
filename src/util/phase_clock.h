// Where a long step's time goes, phase by phase, as one line for the log:
// "read 812 ms (cpu 640), adopt 420 ms (cpu 400), ...". A slow start says
// which part grew; the thread's CPU time beside the wall time tells a busy
// host from a slow phase.
#pragma once

#include <cstdint>
#include <cstdio>
#include <ctime>
#include <string>

#include "util/clock.h"

namespace maru {

class PhaseClock {
 public:
  // Ends the phase running since the last lap (or construction) as `phase`.
  void Lap(const char *phase) {
    const int64_t now = MonotonicNs(), cpu = ThreadCpuNs();
    char buf[128];
    snprintf(buf, sizeof(buf), "%s%s %.0f ms (cpu %.0f)", laps_.empty() ? "" : ", ", phase,
             static_cast<double>(now - last_) / 1e6, static_cast<double>(cpu - last_cpu_) / 1e6);
    laps_ += buf;
    last_ = now;
    last_cpu_ = cpu;
  }
  const std::string &laps() const { return laps_; }
  double total_ms() const { return static_cast<double>(MonotonicNs() - first_) / 1e6; }
  double total_cpu_ms() const { return static_cast<double>(ThreadCpuNs() - first_cpu_) / 1e6; }

 private:
  static int64_t ThreadCpuNs() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  }

  int64_t first_ = MonotonicNs(), first_cpu_ = ThreadCpuNs();
  int64_t last_ = first_, last_cpu_ = first_cpu_;
  std::string laps_;
};

}  // namespace maru
