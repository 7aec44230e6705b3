// StagingCache: the local buffers remote chunks are staged in (a writer's
// bytes until the seal puts them, a reader's fetched copy), registered with
// UCX once and reused across chunks. A fresh 32 MiB buffer costs 8192 page
// faults and, on RDMA transports, a registration each time; a reused one
// costs neither.
//
// Thread-safe. A Buffer keeps its cache alive, so it may outlive the
// RemotePool that made it.
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "util/mutex.h"
#include "util/status.h"

namespace maru {

class StagingCache : public std::enable_shared_from_this<StagingCache> {
 public:
  // Keeps up to `max_cached_bytes` of returned buffers for reuse.
  static std::shared_ptr<StagingCache> Create(ucp_context_h context, uint64_t max_cached_bytes);
  ~StagingCache();
  StagingCache(const StagingCache &) = delete;
  StagingCache &operator=(const StagingCache &) = delete;

  // One staging buffer; goes back to the cache when destroyed.
  class Buffer {
   public:
    ~Buffer();
    uint8_t *data() const { return data_; }
    uint64_t capacity() const { return capacity_; }
    ucp_mem_h memh() const { return memh_; }  // null if it could not be registered

   private:
    friend class StagingCache;
    Buffer() = default;
    std::shared_ptr<StagingCache> cache_;
    uint8_t *data_ = nullptr;
    uint64_t capacity_ = 0;
    ucp_mem_h memh_ = nullptr;
  };

  // A buffer of at least `size` bytes (a cached one if one fits), or ENOMEM.
  // `zeroed`: its first `size` bytes are zeros, not what a chunk staged in
  // it before left (a writer's buffer: what it does not write is published).
  Result<std::unique_ptr<Buffer>> Acquire(uint64_t size, bool zeroed);
  // The UCX context is going away: registrations are dropped now, and
  // buffers returned later are freed, not cached.
  void Close();
  // Figures for tests and benchmarks.
  uint64_t reused() const;
  uint64_t cached_bytes() const;

 private:
  struct Free {
    uint8_t *data;
    uint64_t capacity;
    ucp_mem_h memh;
  };
  StagingCache(ucp_context_h context, uint64_t max_cached_bytes)
      : context_(context), max_cached_bytes_(max_cached_bytes) {}
  // Moves a cached buffer of at least `capacity` into `b`; false if none.
  bool TakeCached(uint64_t capacity, Buffer *b) EXCLUDES(mu_);
  void Return(uint8_t *data, uint64_t capacity, ucp_mem_h memh) EXCLUDES(mu_);
  void Destroy(const Free &f) REQUIRES(mu_);

  mutable Mutex mu_;
  ucp_context_h context_ GUARDED_BY(mu_);  // null once closed
  const uint64_t max_cached_bytes_;
  std::vector<Free> free_ GUARDED_BY(mu_);  // most recently returned last
  uint64_t cached_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t reused_ GUARDED_BY(mu_) = 0;
};

}  // namespace maru
