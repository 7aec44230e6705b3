// The clocks, in one place: wall time for what people read and what is
// stored, the monotonic clock for intervals and deadlines.
#pragma once

#include <cstdint>

namespace maru {

int64_t RealtimeNs();
int64_t MonotonicNs();
int64_t MonotonicMs();
// Milliseconds from a client to nanoseconds, capped (at about 100 years) so
// that no value overflows when added to a clock.
int64_t MsToNs(int64_t ms);

// A point `timeout_ms` from now on the monotonic clock, and whether it has
// gone by.
int64_t DeadlineAfterMs(int64_t timeout_ms);
bool DeadlinePassed(int64_t deadline_ns);

}  // namespace maru
