#include "meta/eviction_frequency.h"

#include <algorithm>
#include <cmath>

namespace maru {

int64_t FrequencyEviction::Key(uint64_t clock, uint32_t reads, uint32_t depth, size_t held,
                               double weight) {
  const double bonus = weight * static_cast<double>(held) * std::log2(1.0 + reads);
  return static_cast<int64_t>(clock) + static_cast<int64_t>(bonus) -
         2 * static_cast<int64_t>(depth);
}

void FrequencyEviction::Use(uint64_t ino, State *s) {
  order_.erase({s->key, ino});
  s->key = Key(++clock_, s->reads, s->depth, state_.size(), kWeight);
  order_.insert({s->key, ino});
}

void FrequencyEviction::OnInsert(uint64_t ino) {
  if (state_.contains(ino)) return OnAccess(ino);  // a new version: a use
  uint32_t depth = 0;
  if (const State *parent = state_.find(chains_.Parent(ino)))
    depth = std::min<uint32_t>(parent->depth + 1, kMaxDepth);
  State s{Key(++clock_, 0, depth, state_.size() + 1, kWeight), 0, depth};
  state_.try_emplace(ino, s);
  order_.insert({s.key, ino});
}

void FrequencyEviction::OnAccess(uint64_t ino) {
  State *s = state_.find(ino);
  if (!s) return;
  if (s->reads < UINT32_MAX) ++s->reads;
  Use(ino, s);
}

void FrequencyEviction::OnRemove(uint64_t ino) {
  const State *s = state_.find(ino);
  if (!s) return;
  order_.erase({s->key, ino});
  state_.erase(ino);
  parked_.erase(ino);
}

bool FrequencyEviction::InOrder(const std::function<bool(uint64_t)> &visit) const {
  return order_.ForEach([&](const std::pair<int64_t, uint64_t> &e) { return visit(e.second); });
}

void FrequencyEviction::Park(uint64_t ino) {
  const State *s = state_.find(ino);
  if (s && order_.erase({s->key, ino})) parked_[ino] = s->key;
}

void FrequencyEviction::UnparkAll() {
  // Only what is still known, and unused since: anything else moved on.
  for (const auto &[ino, key] : parked_)
    if (const State *s = state_.find(ino); s && s->key == key) order_.insert({key, ino});
  parked_.clear();
}

void FrequencyEviction::Unpark(uint64_t ino) {
  auto parked = parked_.find(ino);
  if (parked == parked_.end()) return;
  if (const State *s = state_.find(ino); s && s->key == parked->second)
    order_.insert({parked->second, ino});
  parked_.erase(parked);
}

}  // namespace maru
