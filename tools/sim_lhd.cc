#include "sim_lhd.h"

#include <algorithm>
#include <array>
#include <random>
#include <unordered_map>
#include <vector>

namespace maru::bench {
namespace {

class LhdPolicy : public SimPolicy {
 public:
  LhdPolicy(uint64_t capacity, uint32_t samples, bool leaves)
      : samples_(samples),
        leaves_(leaves),
        bucket_ticks_(std::max<uint64_t>(1, capacity / 16)),
        reconfigure_every_(std::max<uint64_t>(64, capacity / 4)) {
    for (auto &c : hits_) c.fill(0);
    for (auto &c : ends_) c.fill(0);
    // Until something is learned: LRU (density falls with age), reads first.
    for (size_t c = 0; c < kClasses; ++c)
      for (size_t a = 0; a < kAges; ++a)
        density_[c][a] = (1.0 + static_cast<double>(c % 4)) / (1.0 + static_cast<double>(a));
  }

  void Hit(uint64_t b) override {
    State &s = state_.at(b);
    hits_[s.cls][Age(s)] += 1;
    s.reads = std::min<uint32_t>(s.reads + 1, 3);
    s.cls = Class(s);
    s.last = ++clock_;
  }
  void Insert(uint64_t b, uint64_t parent) override {
    State s;
    s.last = ++clock_;
    auto p = parent ? state_.find(parent) : state_.end();
    // Stored right after its parent, which is not new: a later turn's run
    // (the parent sat deeper than the chain's first block).
    s.later =
        p != state_.end() && (p->second.later || (last_insert_ != parent && p->second.depth >= 1));
    s.depth = p != state_.end() ? p->second.depth + 1 : 0;
    if (p != state_.end()) {
      s.parent = parent;
      ++p->second.children;
    }
    s.cls = Class(s);
    s.slot = blocks_.size();
    blocks_.push_back(b);
    state_[b] = s;
    last_insert_ = b;
  }
  uint64_t Victim() override {
    if (blocks_.empty()) return 0;
    uint64_t best = 0;
    double best_density = 0;
    for (uint32_t i = 0; i < samples_; ++i) {
      const uint64_t b = blocks_[rng_() % blocks_.size()];
      const State &s = state_.at(b);
      // Ties (and equal densities along a chain read in one pass) go to
      // the deeper block, so a prefix does not go from under its tail.
      double d = density_[s.cls][Age(s)] - 1e-12 * s.depth;
      if (leaves_ && s.children) d += 1e6;  // a prefix only when no tail was sampled
      if (!best || d < best_density) best = b, best_density = d;
    }
    return best;
  }
  void Erase(uint64_t b) override {
    auto it = state_.find(b);
    if (it == state_.end()) return;
    ends_[it->second.cls][Age(it->second)] += 1;
    if (auto p = state_.find(it->second.parent); it->second.parent && p != state_.end())
      --p->second.children;
    const size_t slot = it->second.slot;
    blocks_[slot] = blocks_.back();
    state_.at(blocks_[slot]).slot = slot;
    blocks_.pop_back();
    state_.erase(it);
    if (++evictions_ % reconfigure_every_ == 0) Reconfigure();
  }
  bool Cascades() const override { return false; }

 private:
  static constexpr size_t kClasses = 8;  // reads 0..3 x later turn
  static constexpr size_t kAges = 128;
  static constexpr double kDecay = 0.9;
  struct State {
    uint64_t last = 0;
    uint32_t reads = 0, depth = 0, children = 0;
    uint64_t parent = 0;
    bool later = false;
    uint8_t cls = 0;
    size_t slot = 0;
  };
  static uint8_t Class(const State &s) { return static_cast<uint8_t>(s.reads + (s.later ? 4 : 0)); }
  size_t Age(const State &s) const {
    return std::min<uint64_t>((clock_ - s.last) / bucket_ticks_, kAges - 1);
  }
  // Hit density by age, from the oldest age down (LHD's formula): the hits
  // still to come of a block that reached age a, over the cache time it
  // will still take.
  void Reconfigure() {
    for (size_t c = 0; c < kClasses; ++c) {
      double events = 0, hits = 0, lifetime = 0;
      for (size_t a = kAges; a-- > 0;) {
        events += hits_[c][a] + ends_[c][a];
        hits += hits_[c][a];
        lifetime += events;
        density_[c][a] = lifetime > 0 ? hits / lifetime : 0;
        hits_[c][a] *= kDecay;
        ends_[c][a] *= kDecay;
      }
    }
  }

  uint32_t samples_;
  bool leaves_;
  uint64_t bucket_ticks_, reconfigure_every_;
  uint64_t clock_ = 0, last_insert_ = 0, evictions_ = 0;
  std::array<std::array<double, kAges>, kClasses> hits_, ends_, density_;
  std::unordered_map<uint64_t, State> state_;
  std::vector<uint64_t> blocks_;
  std::mt19937_64 rng_{42};
};

}  // namespace

std::unique_ptr<SimPolicy> MakeLhdPolicy(uint64_t capacity, uint32_t samples, bool leaves) {
  return std::make_unique<LhdPolicy>(capacity, samples, leaves);
}

}  // namespace maru::bench
