// Least recently used first: every read moves a chunk to the front.
#pragma once

#include <list>
#include <unordered_map>

#include "meta/eviction_policy.h"

namespace maru {

class LruEviction : public EvictionPolicy {
 public:
  void OnInsert(uint64_t ino) override;
  void OnAccess(uint64_t ino) override;
  void OnRemove(uint64_t ino) override;
  // Least recently used first.
  bool InOrder(const std::function<bool(uint64_t)> &visit) const override;
  bool EvictsDescendants() const override { return false; }
  const char *name() const override { return "lru"; }

 private:
  std::list<uint64_t> order_;  // front: most recent
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> where_;
};

}  // namespace maru
