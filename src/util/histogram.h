// Percentiles from a latency histogram of fixed buckets, shared by the
// server's statistics and marutop (which works on differences of them).
#pragma once

#include <cstdint>
#include <vector>

namespace maru {

// `buckets[i]` counts values up to `bounds[i]` (the last bucket: above all
// bounds). Interpolates linearly inside the bucket holding the quantile.
double HistogramPercentile(const std::vector<uint64_t> &buckets, const std::vector<double> &bounds,
                           double q);

}  // namespace maru
