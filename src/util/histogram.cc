#include "util/histogram.h"

#include <cstddef>

namespace maru {

double HistogramPercentile(const std::vector<uint64_t> &buckets, const std::vector<double> &bounds,
                           double q) {
  uint64_t total = 0;
  for (uint64_t b : buckets) total += b;
  if (total == 0 || bounds.empty()) return 0;
  const double rank = q * static_cast<double>(total);
  uint64_t seen = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i] && static_cast<double>(seen + buckets[i]) >= rank) {
      double lo = i == 0 ? 0 : bounds[i - 1];
      double hi = i < bounds.size() ? bounds[i] : bounds.back() * 2;
      return lo + (hi - lo) * (rank - static_cast<double>(seen)) / static_cast<double>(buckets[i]);
    }
    seen += buckets[i];
  }
  return bounds.back();
}

}  // namespace maru
