#include "meta/eviction_policy.h"

#include "meta/eviction_frequency.h"
#include "meta/eviction_lru.h"
#include "meta/eviction_prefix_lru.h"

namespace maru {

uint64_t EvictionPolicy::Victim(const std::function<bool(uint64_t)> &evictable) const {
  uint64_t victim = 0;
  InOrder([&](uint64_t ino) {
    if (!evictable(ino)) return true;
    victim = ino;
    return false;
  });
  return victim;
}

std::vector<std::string> EvictionPolicyNames() {
  return {"frequency", "lru", "prefix"};
}

Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(const std::string &name,
                                                           const ChunkChains &chains) {
  // "hinted" was frequency with hints before frequency took them: kept
  // for command lines that name it.
  if (name == "frequency" || name == "hinted")
    return std::unique_ptr<EvictionPolicy>(new FrequencyEviction(chains));
  if (name == "lru") return std::unique_ptr<EvictionPolicy>(new LruEviction());
  if (name == "prefix") return std::unique_ptr<EvictionPolicy>(new PrefixLruEviction(chains));
  return Status::Error(EINVAL, "unknown eviction policy '" + name + "' (frequency, lru, prefix)");
}

}  // namespace maru
