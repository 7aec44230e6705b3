#include "util/clock.h"

#include <algorithm>
#include <ctime>

namespace maru {
namespace {

int64_t ClockNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace

int64_t RealtimeNs() {
  return ClockNs(CLOCK_REALTIME);
}

int64_t MonotonicNs() {
  return ClockNs(CLOCK_MONOTONIC);
}

int64_t MonotonicMs() {
  return MonotonicNs() / 1000000;
}

int64_t MsToNs(int64_t ms) {
  constexpr int64_t kMaxMs = 100LL * 365 * 24 * 3600 * 1000;
  return std::clamp<int64_t>(ms, -kMaxMs, kMaxMs) * 1000000;
}

int64_t DeadlineAfterMs(int64_t timeout_ms) {
  return MonotonicNs() + MsToNs(timeout_ms);
}

bool DeadlinePassed(int64_t deadline_ns) {
  return MonotonicNs() > deadline_ns;
}

}  // namespace maru
