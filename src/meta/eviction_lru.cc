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

bool LruEviction::InOrder(const std::function<bool(uint64_t)> &visit) const {
  for (auto it = order_.rbegin(); it != order_.rend(); ++it)
    if (!visit(*it)) return false;
  return true;
}

}  // namespace maru
