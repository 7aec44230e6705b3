// Which chunks extend which.
//
// A chunk may name the chunk it extends (its parent chunk: the KV-cache
// prefix it continues), so chunks form chains that share prefixes.
// Eviction reads the graph both ways: a chunk's parent (is that parent
// still extended by anything?) and a chunk's extensions (useless once the
// chunk is gone). It is kept once, here, for the Evictor and the eviction
// policies; an inode's `parent_chunk` is what the database records.
//
// A removed chunk's extensions keep naming it, as their records do (a
// dangling parent); inode numbers are never reused, so nothing takes its
// place.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <unordered_set>

namespace maru {

class ChunkChains {
 public:
  // From now on `ino` extends `parent` (0: nothing).
  void SetParent(uint64_t ino, uint64_t parent);
  // `ino` is gone: it extends nothing and nothing is known to extend it.
  void Remove(uint64_t ino);

  uint64_t Parent(uint64_t ino) const;
  // The chunks naming `ino` as their parent.
  const std::unordered_set<uint64_t> &Extensions(uint64_t ino) const;
  // Calls `visit` once for every chunk that extends `ino`, directly or
  // through others; never for `ino` itself (chains set by hand may loop).
  void ForEachDescendant(uint64_t ino, const std::function<void(uint64_t)> &visit) const;

 private:
  std::unordered_map<uint64_t, uint64_t> parent_;
  std::unordered_map<uint64_t, std::unordered_set<uint64_t>> extensions_;
};

}  // namespace maru
