#include "meta/eviction_hinted.h"

#include <algorithm>

#include "meta/eviction_frequency.h"

namespace maru {

int64_t HintedEviction::Key(uint64_t last, uint32_t reads, uint32_t depth, RetentionHint hint,
                            size_t held) {
  // Without a hint, frequency's key to the unit.
  const int64_t key = FrequencyEviction::Key(last, reads, depth, held, FrequencyEviction::kWeight);
  const double h = static_cast<double>(held);
  switch (hint) {
    case RetentionHint::kKeep:
      return key + static_cast<int64_t>(kKeepWeight * h);
    case RetentionHint::kDrop:
      return key - static_cast<int64_t>(h);
    case RetentionHint::kNone:
      break;
  }
  return key;
}

void HintedEviction::Place(uint64_t ino, State *s) {
  order_.erase({s->key, ino});
  s->key = Key(s->last, s->reads, s->depth, static_cast<RetentionHint>(s->hint), state_.size());
  order_.insert({s->key, ino});
}

void HintedEviction::OnInsert(uint64_t ino) {
  if (state_.count(ino)) return OnAccess(ino);  // a new version: a use
  uint32_t depth = 0;
  if (auto parent = state_.find(chains_.Parent(ino)); parent != state_.end())
    depth = std::min<uint32_t>(parent->second.depth + 1, kMaxDepth);
  State s{0, ++clock_, 0, depth, static_cast<uint32_t>(RetentionHint::kNone)};
  s.key = Key(s.last, 0, depth, RetentionHint::kNone, state_.size() + 1);
  state_.emplace(ino, s);
  order_.insert({s.key, ino});
}

void HintedEviction::OnAccess(uint64_t ino) {
  auto it = state_.find(ino);
  if (it == state_.end()) return;
  State &s = it->second;
  if (s.reads < UINT32_MAX) ++s.reads;
  s.last = ++clock_;
  // Someone still reads it: a drop hint was not about every reader.
  if (s.hint == static_cast<uint32_t>(RetentionHint::kDrop))
    s.hint = static_cast<uint32_t>(RetentionHint::kNone);
  Place(ino, &s);
}

void HintedEviction::OnHint(uint64_t ino, RetentionHint hint) {
  auto it = state_.find(ino);
  if (it == state_.end()) return;
  // Not a use: the chunk keeps its last use, only the hint's offset moves.
  it->second.hint = static_cast<uint32_t>(hint);
  Place(ino, &it->second);
}

void HintedEviction::OnRemove(uint64_t ino) {
  auto it = state_.find(ino);
  if (it == state_.end()) return;
  order_.erase({it->second.key, ino});
  state_.erase(it);
  parked_.erase(ino);
}

bool HintedEviction::InOrder(const std::function<bool(uint64_t)> &visit) const {
  for (const auto &[key, ino] : order_)
    if (!visit(ino)) return false;
  return true;
}

void HintedEviction::Park(uint64_t ino) {
  auto it = state_.find(ino);
  if (it != state_.end() && order_.erase({it->second.key, ino})) parked_[ino] = it->second.key;
}

void HintedEviction::UnparkAll() {
  // Only what is still known and unmoved since: a use or hint put the rest back.
  for (const auto &[ino, key] : parked_)
    if (auto it = state_.find(ino); it != state_.end() && it->second.key == key)
      order_.insert({key, ino});
  parked_.clear();
}

void HintedEviction::Unpark(uint64_t ino) {
  auto parked = parked_.find(ino);
  if (parked == parked_.end()) return;
  if (auto it = state_.find(ino); it != state_.end() && it->second.key == parked->second)
    order_.insert({parked->second, ino});
  parked_.erase(parked);
}

}  // namespace maru
