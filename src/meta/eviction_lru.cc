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
  parked_.erase(ino);
}

bool LruEviction::InOrder(const std::function<bool(uint64_t)> &visit) const {
  return order_.ForEach([&](const std::pair<uint64_t, uint64_t> &e) { return visit(e.second); });
}

void LruEviction::Park(uint64_t ino) {
  auto it = last_use_.find(ino);
  if (it != last_use_.end() && order_.erase({it->second, ino})) parked_[ino] = it->second;
}

void LruEviction::UnparkAll() {
  // Only what is still known, and unused since: anything else moved on.
  for (const auto &[ino, use] : parked_)
    if (auto it = last_use_.find(ino); it != last_use_.end() && it->second == use)
      order_.insert({use, ino});
  parked_.clear();
}

void LruEviction::Unpark(uint64_t ino) {
  auto parked = parked_.find(ino);
  if (parked == parked_.end()) return;
  if (auto it = last_use_.find(ino); it != last_use_.end() && it->second == parked->second)
    order_.insert({parked->second, ino});
  parked_.erase(parked);
}

}  // namespace maru
