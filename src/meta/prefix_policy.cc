#include "meta/prefix_policy.h"

namespace maru {

void PrefixPolicy::OnInsert(uint64_t ino, uint64_t parent) {
  LruPolicy::OnInsert(ino, parent);
  auto [it, fresh] = state_.try_emplace(ino);
  State &s = it->second;
  if (!fresh) {  // re-inserted (a new version, or a new parent): start over
    if (s.extensions == 0) DropTail(ino, s);
    if (s.parent && state_.count(s.parent)) {
      State &p = state_[s.parent];
      if (--p.extensions == 0) AddTail(s.parent, p);
    }
  }
  s.parent = parent;
  s.last_use = ++clock_;
  if (s.extensions == 0) AddTail(ino, s);
  if (parent) {
    auto p = state_.find(parent);
    if (p != state_.end() && p->second.extensions++ == 0) DropTail(parent, p->second);
  }
}

void PrefixPolicy::OnAccess(uint64_t ino) {
  LruPolicy::OnAccess(ino);
  auto it = state_.find(ino);
  if (it == state_.end()) return;
  State &s = it->second;
  if (s.extensions == 0) DropTail(ino, s);
  s.last_use = ++clock_;
  if (s.extensions == 0) AddTail(ino, s);
}

void PrefixPolicy::OnRemove(uint64_t ino) {
  LruPolicy::OnRemove(ino);
  auto it = state_.find(ino);
  if (it == state_.end()) return;
  State &s = it->second;
  if (s.extensions == 0) DropTail(ino, s);
  if (s.parent) {
    auto p = state_.find(s.parent);
    if (p != state_.end() && --p->second.extensions == 0) AddTail(s.parent, p->second);
  }
  // What extended it keeps its place; its parent link now dangles.
  state_.erase(it);
}

uint64_t PrefixPolicy::Victim(const std::function<bool(uint64_t)> &evictable) {
  for (const auto &[use, ino] : tails_)
    if (evictable(ino)) return ino;
  return Oldest(evictable);
}

}  // namespace maru
