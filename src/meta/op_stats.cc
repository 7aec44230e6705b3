#include "meta/op_stats.h"

#include <cmath>

#include "util/histogram.h"

namespace maru {

int OpStats::Register(const std::string &op) {
  int n = used_.load();
  for (int i = 0; i < n; ++i)
    if (slots_[i].name == op) return i;
  if (n == kMaxOps) return kMaxOps - 1;
  slots_[n].name = op;
  used_.store(n + 1);
  return n;
}

std::vector<double> OpStats::BucketBoundsUs() {
  std::vector<double> bounds(kBuckets);
  for (int i = 0; i < kBuckets; ++i) bounds[i] = std::pow(2.0, i / 2.0);
  return bounds;
}

void OpStats::Record(int slot, int64_t elapsed_ns, bool error) {
  Slot &s = slots_[slot];
  s.count.fetch_add(1, std::memory_order_relaxed);
  if (error) s.errors.fetch_add(1, std::memory_order_relaxed);
  s.sum_ns.fetch_add(static_cast<uint64_t>(elapsed_ns), std::memory_order_relaxed);
  double us = static_cast<double>(elapsed_ns) / 1000.0;
  int b = us <= 1 ? 0 : static_cast<int>(std::ceil(2.0 * std::log2(us)));
  if (b > kBuckets) b = kBuckets;
  s.buckets[b].fetch_add(1, std::memory_order_relaxed);
}

void OpStats::Fill(rpc::StatsReply *rep) const {
  std::vector<double> bounds = BucketBoundsUs();
  for (double b : bounds) rep->add_bucket_bounds_us(b);
  int n = used_.load();
  for (int i = 0; i < n; ++i) {
    const Slot &s = slots_[i];
    rpc::OpStats *o = rep->add_ops();
    o->set_op(s.name);
    o->set_count(s.count.load());
    o->set_errors(s.errors.load());
    o->set_sum_us(static_cast<double>(s.sum_ns.load()) / 1000.0);
    std::vector<uint64_t> buckets;
    for (const auto &b : s.buckets) {
      buckets.push_back(b.load());
      o->add_buckets(buckets.back());
    }
    o->set_p50_us(HistogramPercentile(buckets, bounds, 0.50));
    o->set_p99_us(HistogramPercentile(buckets, bounds, 0.99));
  }
}

}  // namespace maru
