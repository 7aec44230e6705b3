// Least recently used first: every read moves a chunk to the back of the
// line. Kept ordered by last use, so parking a chunk and putting it back
// returns it to its place.
#pragma once

#include <unordered_map>
#include <utility>
#include <vector>

#include "meta/eviction_policy.h"
#include "util/flat_map.h"
#include "util/sorted_runs.h"

namespace maru {

class LruEviction : public EvictionPolicy {
 public:
  void OnInsert(uint64_t ino) override;
  void OnAccess(uint64_t ino) override;
  void OnRemove(uint64_t ino) override;
  // Least recently used first.
  bool InOrder(const std::function<bool(uint64_t)> &visit) const override;
  void Park(uint64_t ino) override;
  void UnparkAll() override;
  void Unpark(uint64_t ino) override;
  void Reserve(size_t chunks) override { last_use_.reserve(chunks); }
  bool EvictsDescendants() const override { return false; }
  const char *name() const override { return "lru"; }

 private:
  uint64_t clock_ = 0;
  SortedRuns<std::pair<uint64_t, uint64_t>> order_;  // (last use, ino), least recent first
  FlatMap<uint64_t> last_use_;                     // ino -> last use (a flat table: one per chunk)
  std::unordered_map<uint64_t, uint64_t> parked_;  // taken out of order_: ino -> last use
};

}  // namespace maru
