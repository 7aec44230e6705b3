#include "meta/eviction_lru.h"

namespace maru {

void LruEviction::OnInsert(uint64_t ino) {
  if (last_use_.count(ino)) return OnAccess(ino);
  last_use_[ino] = ++clock_;
  order_.insert({clock_, ino});
}

void LruEviction::OnAccess(uint64_t ino) {
  auto it = last_use_.find(ino);
  if (it == last_use_.end()) return;
  order_.erase({it->second, ino});
  it->second = ++clock_;
  order_.insert({clock_, ino});
}

void LruEviction::OnRemove(uint64_t ino) {
  auto it = last_use_.find(ino);
  if (it == last_use_.end()) return;
  order_.erase({it->second, ino});
  last_use_.erase(it);
}

bool LruEviction::InOrder(const std::function<bool(uint64_t)> &visit) const {
  for (const auto &[use, ino] : order_)
    if (!visit(ino)) return false;
  return true;
}

void LruEviction::Park(uint64_t ino) {
  auto it = last_use_.find(ino);
  if (it != last_use_.end() && order_.erase({it->second, ino}))
    parked_.push_back({it->second, ino});
}

void LruEviction::UnparkAll() {
  // Only what is still known, and unused since: anything else moved on.
  for (const auto &[use, ino] : parked_)
    if (auto it = last_use_.find(ino); it != last_use_.end() && it->second == use)
      order_.insert({use, ino});
  parked_.clear();
}

}  // namespace maru
