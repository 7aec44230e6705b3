#include "meta/eviction_prefix_lru.h"

namespace maru {

uint32_t PrefixLruEviction::KnownExtensions(uint64_t ino) const {
  uint32_t n = 0;
  for (uint64_t child : chains_.Extensions(ino)) n += state_.count(child);
  return n;
}

void PrefixLruEviction::CountExtension(uint64_t parent, int delta) {
  auto it = parent ? state_.find(parent) : state_.end();
  if (it == state_.end()) return;
  State &p = it->second;
  if (delta > 0 && p.extensions++ == 0) DropTail(parent, p);
  if (delta < 0 && --p.extensions == 0) AddTail(parent, p);
}

void PrefixLruEviction::OnInsert(uint64_t ino) {
  if (state_.count(ino)) return OnAccess(ino);  // a new version
  LruEviction::OnInsert(ino);
  // Counted before `ino` is known, so a chunk naming itself is no tail of
  // its own.
  State s{KnownExtensions(ino), ++clock_};
  state_.emplace(ino, s);
  if (s.extensions == 0) AddTail(ino, s);
  CountExtension(chains_.Parent(ino), +1);
}

void PrefixLruEviction::OnAccess(uint64_t ino) {
  LruEviction::OnAccess(ino);
  auto it = state_.find(ino);
  if (it == state_.end()) return;
  State &s = it->second;
  if (s.extensions == 0) DropTail(ino, s);
  s.last_use = ++clock_;
  if (s.extensions == 0) AddTail(ino, s);
}

void PrefixLruEviction::OnRemove(uint64_t ino) {
  LruEviction::OnRemove(ino);
  auto it = state_.find(ino);
  if (it == state_.end()) return;
  if (it->second.extensions == 0) DropTail(ino, it->second);
  state_.erase(it);
  parked_tails_.erase(ino);
  // What extended it keeps its place; its parent link now dangles.
  CountExtension(chains_.Parent(ino), -1);
}

bool PrefixLruEviction::InOrder(const std::function<bool(uint64_t)> &visit) const {
  if (!tails_.ForEach([&](const std::pair<uint64_t, uint64_t> &e) { return visit(e.second); }))
    return false;
  return LruEviction::InOrder(visit);
}

void PrefixLruEviction::Park(uint64_t ino) {
  LruEviction::Park(ino);
  auto it = state_.find(ino);
  if (it == state_.end() || it->second.extensions) return;
  if (tails_.erase({it->second.last_use, ino})) parked_tails_[ino] = it->second.last_use;
}

void PrefixLruEviction::UnparkAll() {
  LruEviction::UnparkAll();
  // Only what is still a tail, and unused since.
  for (const auto &[ino, use] : parked_tails_)
    if (auto it = state_.find(ino);
        it != state_.end() && it->second.extensions == 0 && it->second.last_use == use)
      tails_.insert({use, ino});
  parked_tails_.clear();
}

void PrefixLruEviction::Unpark(uint64_t ino) {
  LruEviction::Unpark(ino);
  auto parked = parked_tails_.find(ino);
  if (parked == parked_tails_.end()) return;
  // Only if still a tail, and unused since; a chunk that became a tail
  // while parked was put back then.
  if (auto it = state_.find(ino);
      it != state_.end() && it->second.extensions == 0 && it->second.last_use == parked->second)
    tails_.insert({parked->second, ino});
  parked_tails_.erase(parked);
}

}  // namespace maru
