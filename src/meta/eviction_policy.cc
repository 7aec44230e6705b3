#include "meta/eviction_policy.h"

#include "meta/eviction_lru.h"
#include "meta/eviction_prefix_lru.h"

namespace maru {

Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(const std::string &name,
                                                           const ChunkChains &chains) {
  if (name == "lru") return std::unique_ptr<EvictionPolicy>(new LruEviction());
  if (name == "prefix") return std::unique_ptr<EvictionPolicy>(new PrefixLruEviction(chains));
  return Status::Error(EINVAL, "unknown eviction policy '" + name + "' (lru, prefix)");
}

}  // namespace maru
