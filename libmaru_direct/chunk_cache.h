// Handles kept for reuse: the maru_chunk_t blocks a thread released, handed
// out again by its next opens.
#pragma once

#include <new>
#include <vector>

#include "handles.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)  // clang's way to say it
#define MARU_HAS_ASAN 1
#endif
#endif

namespace maru::direct {

// Handles this thread released, kept for its next opens. A lookup of 128
// keys makes 128 handles and their release frees them, more than malloc's
// per-thread cache keeps of one size (7), so most went its slow way. Not
// under AddressSanitizer, which must see a handle used after its release.
struct ChunkCache {
#if defined(__SANITIZE_ADDRESS__) || defined(MARU_HAS_ASAN)
  static constexpr size_t kKeep = 0;
#else
  static constexpr size_t kKeep = 256;  // ~64 KiB a thread
#endif
  std::vector<void *> blocks;
  ChunkCache();
  ~ChunkCache();
};

// This thread's cache; null when there is none (off, or gone at thread exit).
ChunkCache *ThisThreadsChunks();

// A new handle, from `cache` (this thread's, looked up once for a batch) if
// it holds one; null when out of memory.
inline maru_chunk_t *NewChunk(ChunkCache *cache = ThisThreadsChunks()) {
  void *block = nullptr;
  if (cache && !cache->blocks.empty()) {
    block = cache->blocks.back();
    cache->blocks.pop_back();
  }
  if (!block) block = ::operator new(sizeof(maru_chunk_t), std::nothrow);
  return block ? new (block) maru_chunk_t() : nullptr;
}

// Ends a handle from NewChunk() (which `delete` may end too), kept in
// `cache` (this thread's, looked up once for a batch) if it has room.
inline void FreeChunk(maru_chunk_t *c, ChunkCache *cache = ThisThreadsChunks()) {
  c->~maru_chunk();
  if (cache && cache->blocks.size() < cache->blocks.capacity()) {
    cache->blocks.push_back(c);
    return;
  }
  ::operator delete(c);
}

}  // namespace maru::direct
