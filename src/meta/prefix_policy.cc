#include "meta/prefix_policy.h"

namespace maru {

void PrefixPolicy::OnInsert(uint64_t ino, uint64_t parent) {
  LruPolicy::OnInsert(ino, parent);
  if (parent && !parent_.count(ino)) {
    parent_[ino] = parent;
    ++extensions_[parent];
  }
}

void PrefixPolicy::OnRemove(uint64_t ino) {
  LruPolicy::OnRemove(ino);
  auto it = parent_.find(ino);
  if (it == parent_.end()) return;
  auto ext = extensions_.find(it->second);
  if (ext != extensions_.end() && --ext->second == 0) extensions_.erase(ext);
  parent_.erase(it);
}

uint64_t PrefixPolicy::Victim(const std::function<bool(uint64_t)> &evictable) {
  uint64_t tail = Oldest([&](uint64_t ino) { return !extensions_.count(ino) && evictable(ino); });
  return tail ? tail : Oldest(evictable);
}

}  // namespace maru
