// Prefix-aware LRU. A chunk is only useful together with the prefix it
// extends, so the least recently used *tail* of a chain (a chunk nothing
// extends) goes first; its prefix stays useful to every other chain that
// shares it. When only prefixes are left, the oldest goes and takes its
// descendants along, which are useless without it.
#pragma once

#include "meta/lru_policy.h"

namespace maru {

class PrefixPolicy : public LruPolicy {
 public:
  void OnInsert(uint64_t ino, uint64_t parent) override;
  void OnRemove(uint64_t ino) override;
  uint64_t Victim(const std::function<bool(uint64_t)> &evictable) override;
  bool EvictsDescendants() const override { return true; }
  const char *name() const override { return "prefix"; }

 private:
  std::unordered_map<uint64_t, uint32_t> extensions_;  // ino -> chunks extending it
  std::unordered_map<uint64_t, uint64_t> parent_;      // ino -> its prefix
};

}  // namespace maru
