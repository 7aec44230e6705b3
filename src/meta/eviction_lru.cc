#include "meta/eviction_lru.h"

namespace maru {

void LruEviction::OnInsert(uint64_t ino) {
  if (where_.count(ino)) return OnAccess(ino);
  order_.push_front(ino);
  where_[ino] = order_.begin();
}

void LruEviction::OnAccess(uint64_t ino) {
  auto it = where_.find(ino);
  if (it == where_.end()) return;
  order_.splice(order_.begin(), order_, it->second);
}

void LruEviction::OnRemove(uint64_t ino) {
  auto it = where_.find(ino);
  if (it == where_.end()) return;
  order_.erase(it->second);
  where_.erase(it);
}

uint64_t LruEviction::Oldest(const std::function<bool(uint64_t)> &accept) const {
  for (auto it = order_.rbegin(); it != order_.rend(); ++it)
    if (accept(*it)) return *it;
  return 0;
}

uint64_t LruEviction::Victim(const std::function<bool(uint64_t)> &evictable) {
  return Oldest(evictable);
}

}  // namespace maru
