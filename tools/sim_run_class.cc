#include "sim_run_class.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace maru::bench {
namespace {

// A run: blocks stored one after another, each extending the one before
// (one request's missing blocks). The server sees it as chunks sealed in a
// row down one chain.
struct Run {
  std::vector<uint64_t> blocks;  // in order; the last is the run's tail
  bool extends_deep = false;     // its first block extends a chain of >= 2 blocks
};

class RunClassPolicy : public SimPolicy {
 public:
  RunClassPolicy(uint64_t, double weight, double floor) : weight_(weight), floor_(floor) {
    for (double &h : hits_) h = 1;
    for (double &e : ends_) e = 1;
  }

  void Hit(uint64_t b) override {
    State &s = state_.at(b);
    Learn(hits_, Class(b, s));
    ++s.reads;
    s.last = ++clock_;
    Rekey(b, s);
  }
  void Insert(uint64_t b, uint64_t parent) override {
    State s;
    s.last = ++clock_;
    auto p = parent ? state_.find(parent) : state_.end();
    if (p != state_.end()) s.depth = p->second.depth + 1;
    Run *run = nullptr;
    // It joins its parent's run when it is stored right after its parent,
    // which is that run's tail.
    if (p != state_.end() && last_insert_ == parent) {
      run = &runs_.at(p->second.run);
      if (run->blocks.back() != parent) run = nullptr;
    }
    if (run) {
      s.run = p->second.run;
    } else {
      s.run = ++next_run_;
      run = &runs_[s.run];
      run->extends_deep = p != state_.end() && p->second.depth >= 1;
    }
    const size_t before = LengthClass(run->blocks.size());
    run->blocks.push_back(b);
    last_insert_ = b;
    state_[b] = s;
    Rekey(b, state_[b]);
    // The previous tail is interior now; a longer run may change the class
    // of all its blocks (twice per run at most).
    if (LengthClass(run->blocks.size()) != before) {
      for (uint64_t m : run->blocks)
        if (auto it = state_.find(m); it != state_.end() && m != b) Rekey(m, it->second);
    } else if (run->blocks.size() >= 2) {
      const uint64_t prev = run->blocks[run->blocks.size() - 2];
      if (auto it = state_.find(prev); it != state_.end()) Rekey(prev, it->second);
    }
  }
  uint64_t Victim() override { return order_.empty() ? 0 : order_.begin()->second; }
  void Erase(uint64_t b) override {
    auto it = state_.find(b);
    if (it == state_.end()) return;
    Learn(ends_, Class(b, it->second));
    order_.erase({it->second.key, b});
    const uint64_t run = it->second.run;
    state_.erase(it);
    if (++erased_[run] == runs_.at(run).blocks.size()) {
      runs_.erase(run);
      erased_.erase(run);
    }
  }
  bool Cascades() const override { return false; }

 private:
  struct State {
    uint64_t last = 0;
    uint32_t reads = 0;
    uint32_t depth = 0;
    uint64_t run = 0;
    double key = 0;
  };
  static constexpr int kClasses = 3 * 2 * 3 * 2;
  static constexpr double kDecay = 0.99995;

  static size_t LengthClass(size_t n) { return n <= 4 ? 0 : n <= 16 ? 1 : 2; }
  size_t Class(uint64_t b, const State &s) const {
    const Run &run = runs_.at(s.run);
    const size_t reads = std::min<uint32_t>(s.reads, 2);
    const size_t tail = run.blocks.back() == b ? 1 : 0;
    return ((reads * 2 + (run.extends_deep ? 1 : 0)) * 3 + LengthClass(run.blocks.size())) * 2 +
           tail;
  }
  // Counts an event (a read, an eviction) of a block of class `c`,
  // forgetting old ones.
  void Learn(double *counts, size_t c) {
    for (int i = 0; i < kClasses; ++i) {
      hits_[i] *= kDecay;
      ends_[i] *= kDecay;
    }
    counts[c] += 1;
  }
  // Held chunks per doubling of the class's odds of a read before its
  // eviction, against all classes'.
  double Bonus(size_t c) const {
    double h = 0, e = 0;
    for (int i = 0; i < kClasses; ++i) {
      h += hits_[i];
      e += ends_[i];
    }
    const double p = hits_[c] / (hits_[c] + ends_[c]), mean = h / (h + e);
    const double ratio = std::clamp(std::log2(p / mean), floor_, 3.0);
    return weight_ * static_cast<double>(state_.size()) * ratio;
  }
  void Rekey(uint64_t b, State &s) {
    order_.erase({s.key, b});
    s.key = static_cast<double>(s.last) + Bonus(Class(b, s)) - 2.0 * s.depth;
    order_.insert({s.key, b});
  }

  double weight_, floor_;
  double hits_[kClasses], ends_[kClasses];
  uint64_t clock_ = 0, last_insert_ = 0, next_run_ = 0;
  std::unordered_map<uint64_t, State> state_;
  std::unordered_map<uint64_t, Run> runs_;
  std::unordered_map<uint64_t, size_t> erased_;  // run -> its blocks evicted
  std::set<std::pair<double, uint64_t>> order_;
};

}  // namespace

std::unique_ptr<SimPolicy> MakeRunClassPolicy(uint64_t capacity, double weight, double floor) {
  return std::make_unique<RunClassPolicy>(capacity, weight, floor);
}

}  // namespace maru::bench
