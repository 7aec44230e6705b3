#include "meta/eviction_lru.h"

namespace maru {

void LruEviction::OnInsert(uint64_t ino) {
  if (last_use_.contains(ino)) return OnAccess(ino);
  last_use_.try_emplace(ino, ++clock_);
  order_.insert({clock_, ino});
}

void LruEviction::OnAccess(uint64_t ino) {
  uint64_t *use = last_use_.find(ino);
  if (!use) return;
  order_.erase({*use, ino});
  *use = ++clock_;
  order_.insert({clock_, ino});
}

void LruEviction::OnRemove(uint64_t ino) {
  const uint64_t *use = last_use_.find(ino);
  if (!use) return;
  order_.erase({*use, ino});
  last_use_.erase(ino);
  parked_.erase(ino);
}

bool LruEviction::InOrder(const std::function<bool(uint64_t)> &visit) const {
  return order_.ForEach([&](const std::pair<uint64_t, uint64_t> &e) { return visit(e.second); });
}

void LruEviction::Park(uint64_t ino) {
  const uint64_t *use = last_use_.find(ino);
  if (use && order_.erase({*use, ino})) parked_[ino] = *use;
}

void LruEviction::UnparkAll() {
  // Only what is still known, and unused since: anything else moved on.
  for (const auto &[ino, use] : parked_)
    if (const uint64_t *now = last_use_.find(ino); now && *now == use) order_.insert({use, ino});
  parked_.clear();
}

void LruEviction::Unpark(uint64_t ino) {
  auto parked = parked_.find(ino);
  if (parked == parked_.end()) return;
  if (const uint64_t *now = last_use_.find(ino); now && *now == parked->second)
    order_.insert({parked->second, ino});
  parked_.erase(parked);
}

}  // namespace maru
