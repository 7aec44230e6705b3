#include "sim_freq_variant.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <unordered_map>

namespace maru::bench {
namespace {

// frequency's key with its parts as parameters.
class FrequencyVariant : public SimPolicy {
 public:
  explicit FrequencyVariant(const FrequencyVariantParams &p) : p_(p) {}
  void Hit(uint64_t b) override {
    State &s = state_.at(b);
    if (clock_ - s.last >= state_.size() * p_.quick) {
      ++(s.reads ? success1_ : success0_);
      Decay();
    }
    ++s.reads;
    s.last = ++clock_;
    Place(b, &s);
  }
  void Insert(uint64_t b, uint64_t parent) override {
    State s;
    s.last = ++clock_;
    if (auto it = state_.find(parent); parent && it != state_.end()) {
      const State &ps = it->second;
      s.depth = ps.depth + 1;
      s.parent = parent;
      const bool parent_read_now = ps.reads > 0 && clock_ - ps.last <= p_.recent;
      if (p_.inherit_run > 0) {
        if (parent_read_now) {
          s.run = 1;
          s.inherited = std::min<uint64_t>(ps.reads, p_.inherit_cap);
        } else if (ps.run > 0) {
          s.run = ps.run + 1;
          s.inherited = ps.inherited;
        }
        if (s.run > p_.inherit_run) {
          s.inherited = 0;
          if (s.run == p_.inherit_run + 1) Disinherit(parent, p_.inherit_run);
        }
      }
    }
    state_[b] = s;
    Place(b, &state_[b], false);
  }
  uint64_t Victim() override { return order_.empty() ? 0 : order_.begin()->second; }
  void Erase(uint64_t b) override {
    auto it = state_.find(b);
    if (it == state_.end()) return;
    order_.erase({it->second.key, b});
    ++(it->second.reads ? failure1_ : failure0_);
    Decay();
    state_.erase(it);
  }
  bool Cascades() const override { return false; }

 private:
  struct State {
    int64_t key = 0;
    uint64_t last = 0, reads = 0, depth = 0, run = 0, inherited = 0, parent = 0;
  };
  void Place(uint64_t b, State *s, bool placed = true) {
    if (placed) order_.erase({s->key, b});
    const double reads = static_cast<double>(std::max(s->reads, s->inherited));
    const double held = static_cast<double>(state_.size());
    double bonus = Weight() * held * std::log2(1 + reads);
    s->key = static_cast<int64_t>(s->last) + static_cast<int64_t>(bonus) -
             static_cast<int64_t>(p_.depth_factor * static_cast<double>(s->depth));
    order_.insert({s->key, b});
  }
  // The run ending at `b` turned out long: its first `n` blocks lose what they inherited.
  void Disinherit(uint64_t b, uint64_t n) {
    for (uint64_t i = 0; i < n && b; ++i) {
      auto it = state_.find(b);
      if (it == state_.end() || it->second.run == 0) return;
      if (it->second.inherited) {
        it->second.inherited = 0;
        Place(b, &it->second);
      }
      b = it->second.parent;
    }
  }

  void Decay() {
    if (success0_ + success1_ + failure0_ + failure1_ < 2 * state_.size()) return;
    success0_ /= 2, success1_ /= 2, failure0_ /= 2, failure1_ /= 2;
  }
  double Weight() const {
    if (!p_.adapt) return p_.weight;
    if (failure0_ + failure1_ < p_.evidence) return p_.weight * p_.start;
    const double p0 = (success0_ + 1) / (success0_ + failure0_ + 2);
    const double p1 = (success1_ + 1) / (success1_ + failure1_ + 2);
    const double r = p1 / p0 - 1;
    return p_.weight * std::clamp(r / p_.margin, 0.0, p_.max_scale);
  }

  FrequencyVariantParams p_;
  double success0_ = 0, success1_ = 0, failure0_ = 0, failure1_ = 0;
  uint64_t clock_ = 0;
  std::unordered_map<uint64_t, State> state_;
  std::set<std::pair<int64_t, uint64_t>> order_;
};

}  // namespace

bool ParseFrequencyVariant(const std::string &name, FrequencyVariantParams *p) {
  if (name.rfind("fv", 0) != 0) return false;
  // fv/w0.25/d2/k6/c3/r100
  size_t at = 2;
  while (at < name.size()) {
    if (name[at] != '/') return false;
    const char what = name[at + 1];
    char *end = nullptr;
    const double v = strtod(name.c_str() + at + 2, &end);
    at = static_cast<size_t>(end - name.c_str());
    switch (what) {
      case 'w':
        p->weight = v;
        break;
      case 'd':
        p->depth_factor = v;
        break;
      case 'k':
        p->inherit_run = static_cast<uint64_t>(v);
        break;
      case 'c':
        p->inherit_cap = static_cast<uint64_t>(v);
        break;
      case 'r':
        p->recent = static_cast<uint64_t>(v);
        break;
      case 'a':
        p->adapt = v != 0;
        break;
      case 'm':
        p->margin = v;
        break;
      case 'x':
        p->max_scale = v;
        break;
      case 'q':
        p->quick = v;
        break;
      case 's':
        p->start = v;
        break;
      case 'e':
        p->evidence = v;
        break;
      default:
        return false;
    }
  }
  return true;
}

std::unique_ptr<SimPolicy> MakeFrequencyVariant(const FrequencyVariantParams &p) {
  return std::make_unique<FrequencyVariant>(p);
}

}  // namespace maru::bench
