#include "chunk_cache.h"

namespace maru::direct {
namespace {

thread_local bool chunk_cache_gone = false;  // trivial: readable after the cache went

}  // namespace

ChunkCache::ChunkCache() {
  try {
    blocks.reserve(kKeep);  // once: no allocation after (none kept if this fails)
  } catch (const std::bad_alloc &) {
  }
}

ChunkCache::~ChunkCache() {
  for (void *b : blocks) ::operator delete(b);
  chunk_cache_gone = true;
}

ChunkCache *ThisThreadsChunks() {
  if (ChunkCache::kKeep == 0 || chunk_cache_gone) return nullptr;
  thread_local ChunkCache cache;
  return &cache;
}

}  // namespace maru::direct
