// Which sealed chunk to evict next. The engine tells the policy when
// chunks appear, are read and go away; the policy orders them. Whether a
// chunk may be evicted at all (pins, leases, open handles) is the engine's
// call, passed in as a predicate.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>

#include "util/status.h"

namespace maru {

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  // A sealed chunk appeared; `parent` is the chunk it extends (0 if none).
  virtual void OnInsert(uint64_t ino, uint64_t parent) = 0;
  virtual void OnAccess(uint64_t ino) = 0;
  virtual void OnRemove(uint64_t ino) = 0;
  // The next chunk to evict among those `evictable` accepts; 0 if none.
  virtual uint64_t Victim(const std::function<bool(uint64_t)> &evictable) = 0;
  // Whether evicting a chunk also evicts the chunks that extend it.
  virtual bool EvictsDescendants() const = 0;
  virtual const char *name() const = 0;
};

// "lru" or "prefix"; EINVAL for anything else.
Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(const std::string &name);

}  // namespace maru
