#include "meta/eviction_policy.h"

#include "meta/lru_policy.h"
#include "meta/prefix_policy.h"

namespace maru {

Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(const std::string &name) {
  if (name == "lru") return std::unique_ptr<EvictionPolicy>(new LruPolicy());
  if (name == "prefix") return std::unique_ptr<EvictionPolicy>(new PrefixPolicy());
  return Status::Error(EINVAL, "unknown eviction policy '" + name + "' (lru, prefix)");
}

}  // namespace maru
