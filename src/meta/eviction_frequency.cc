#include "meta/eviction_frequency.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace maru {

void FrequencyEviction::Evidence::Reread(uint32_t reads, uint64_t age, size_t held) {
  if (static_cast<double>(age) < kQuick * static_cast<double>(held)) return;
  ++reread[reads > 0];
  Decay(held);
}

void FrequencyEviction::Evidence::Gone(uint32_t reads, size_t held) {
  ++gone[reads > 0];
  Decay(held);
}

void FrequencyEviction::Evidence::Decay(size_t held) {
  // Halved at twice the chunks held: about the last cache lifetime or two
  // counts, so the weight follows a workload that changes.
  if (reread[0] + reread[1] + gone[0] + gone[1] < 2 * std::max<uint64_t>(held, kEvidence)) return;
  for (int c = 0; c < 2; ++c) {
    reread[c] /= 2;
    gone[c] /= 2;
  }
}

double FrequencyEviction::Evidence::Weight() const {
  if (gone[0] + gone[1] < kEvidence) return 0;  // no evidence yet: LRU's order
  // The chance that a use is followed by a read rather than by the chunk
  // going, per class (+1/+2: a class not seen yet counts as even odds).
  auto odds = [&](int c) {
    return (static_cast<double>(reread[c]) + 1) / static_cast<double>(reread[c] + gone[c] + 2);
  };
  const double gain = odds(1) / odds(0) - 1;
  return kWeight * std::clamp(gain / kMargin, 0.0, 1.0);
}

int64_t FrequencyEviction::HintOffset(RetentionHint hint, size_t held) {
  const double h = static_cast<double>(held);
  switch (hint) {
    case RetentionHint::kKeep:
      return static_cast<int64_t>(kKeepWeight * h);
    case RetentionHint::kDrop:
      return -static_cast<int64_t>(h);
    case RetentionHint::kNone:
      break;
  }
  return 0;
}

int64_t FrequencyEviction::Key(uint64_t clock, uint32_t reads, uint32_t depth, RetentionHint hint,
                               size_t held, double weight) {
  const double bonus = weight * static_cast<double>(held) * std::log2(1.0 + reads);
  return static_cast<int64_t>(clock) + static_cast<int64_t>(bonus) -
         2 * static_cast<int64_t>(depth) + HintOffset(hint, held);
}

void FrequencyEviction::Use(uint64_t ino, State *s) {
  order_.erase({s->key, ino});
  s->key = Key(++clock_, s->reads, s->depth, static_cast<RetentionHint>(s->hint), state_.size(),
               evidence_.Weight());
  s->last = static_cast<uint32_t>(clock_);
  order_.insert({s->key, ino});
}

void FrequencyEviction::OnInsert(uint64_t ino) {
  if (state_.contains(ino)) return OnAccess(ino);  // a new version: a use
  uint32_t depth = 0;
  if (const State *parent = state_.find(chains_.Parent(ino)))
    depth = std::min<uint32_t>(parent->depth + 1, kMaxDepth);
  ++clock_;
  const int64_t key =
      Key(clock_, 0, depth, RetentionHint::kNone, state_.size() + 1, evidence_.Weight());
  State s{key, static_cast<uint32_t>(clock_), 0, static_cast<uint16_t>(depth),
          static_cast<uint16_t>(RetentionHint::kNone)};
  state_.try_emplace(ino, s);
  order_.insert({s.key, ino});
}

void FrequencyEviction::OnAccess(uint64_t ino) {
  State *s = state_.find(ino);
  if (!s) return;
  // Ticks since the last use, as the next tick will count them (mod 2^32).
  const uint32_t age = static_cast<uint32_t>(clock_ + 1) - s->last;
  evidence_.Reread(s->reads, age, state_.size());
  if (s->reads < kMaxReads) ++s->reads;
  // Someone still reads it: a drop hint was not about every reader.
  if (s->hint == static_cast<uint16_t>(RetentionHint::kDrop))
    s->hint = static_cast<uint16_t>(RetentionHint::kNone);
  Use(ino, s);
}

bool FrequencyEviction::ExtendedByLiveChain(uint64_t ino) const {
  const std::unordered_set<uint64_t> &extensions = chains_.Extensions(ino);
  if (extensions.size() > kDropFanout) return true;
  for (uint64_t e : extensions) {
    if (e == ino) continue;           // chains set by hand may loop
    const State *s = state_.find(e);  // none: still being written
    if (!s || (s->reads > 0 && s->hint != static_cast<uint16_t>(RetentionHint::kDrop))) return true;
  }
  return false;
}

void FrequencyEviction::OnHint(uint64_t ino, RetentionHint hint) {
  State *s = state_.find(ino);
  if (!s) return;
  if (hint == RetentionHint::kDrop && ExtendedByLiveChain(ino)) return;
  // Not a use: the key moves by the offsets' difference, nothing else,
  // and a parked chunk stays parked (under its new key).
  const bool placed = order_.erase({s->key, ino});
  s->key += HintOffset(hint, state_.size()) -
            HintOffset(static_cast<RetentionHint>(s->hint), state_.size());
  s->hint = static_cast<uint16_t>(hint);
  if (placed)
    order_.insert({s->key, ino});
  else if (auto parked = parked_.find(ino); parked != parked_.end())
    parked->second = s->key;
}

void FrequencyEviction::OnRemove(uint64_t ino) {
  const State *s = state_.find(ino);
  if (!s) return;
  const uint32_t reads = s->reads;
  order_.erase({s->key, ino});
  state_.erase(ino);
  parked_.erase(ino);
  evidence_.Gone(reads, state_.size());
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
