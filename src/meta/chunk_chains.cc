#include "meta/chunk_chains.h"

#include <vector>

namespace maru {

void ChunkChains::SetParent(uint64_t ino, uint64_t parent) {
  if (auto old = parent_.find(ino); old != parent_.end()) {
    if (auto it = extensions_.find(old->second); it != extensions_.end()) {
      it->second.erase(ino);
      if (it->second.empty()) extensions_.erase(it);
    }
    parent_.erase(old);
  }
  if (!parent) return;
  parent_[ino] = parent;
  extensions_[parent].insert(ino);
}

void ChunkChains::Remove(uint64_t ino) {
  SetParent(ino, 0);
  extensions_.erase(ino);  // what extends it keeps a dangling parent
}

uint64_t ChunkChains::Parent(uint64_t ino) const {
  auto it = parent_.find(ino);
  return it == parent_.end() ? 0 : it->second;
}

const std::unordered_set<uint64_t> &ChunkChains::Extensions(uint64_t ino) const {
  static const std::unordered_set<uint64_t> kNone;
  auto it = extensions_.find(ino);
  return it == extensions_.end() ? kNone : it->second;
}

void ChunkChains::ForEachDescendant(uint64_t ino,
                                    const std::function<void(uint64_t)> &visit) const {
  std::vector<uint64_t> frontier{ino};
  std::unordered_set<uint64_t> seen{ino};
  while (!frontier.empty()) {
    uint64_t at = frontier.back();
    frontier.pop_back();
    for (uint64_t child : Extensions(at)) {
      if (!seen.insert(child).second) continue;
      frontier.push_back(child);
      visit(child);
    }
  }
}

}  // namespace maru
