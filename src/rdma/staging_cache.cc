#include "rdma/staging_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace maru {
namespace {

constexpr uint64_t kPage = 4096;

// Sizes are rounded up to a power of two (at least a page) so that buffers
// of similar chunks fit each other.
uint64_t CapacityFor(uint64_t size) {
  uint64_t c = kPage;
  while (c < size) c <<= 1;
  return c;
}

}  // namespace

std::shared_ptr<StagingCache> StagingCache::Create(ucp_context_h context,
                                                   uint64_t max_cached_bytes) {
  return std::shared_ptr<StagingCache>(new StagingCache(context, max_cached_bytes));
}

StagingCache::~StagingCache() {
  Close();
}

void StagingCache::Close() {
  MutexLock lock(&mu_);
  for (const Free &f : free_) Destroy(f);
  free_.clear();
  cached_bytes_ = 0;
  context_ = nullptr;
}

void StagingCache::Destroy(const Free &f) {
  if (f.memh && context_) ucp_mem_unmap(context_, f.memh);
  munmap(f.data, f.capacity);
}

bool StagingCache::TakeCached(uint64_t capacity, Buffer *b) {
  MutexLock lock(&mu_);
  // The smallest cached buffer that fits, if it is at most twice the size
  // (a small chunk must not pin a huge buffer).
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it)
    if (it->capacity >= capacity && it->capacity <= 2 * capacity &&
        (best == free_.end() || it->capacity < best->capacity))
      best = it;
  if (best == free_.end()) return false;
  b->data_ = best->data;
  b->capacity_ = best->capacity;
  b->memh_ = best->memh;
  cached_bytes_ -= best->capacity;
  free_.erase(best);
  ++reused_;
  return true;
}

Result<std::unique_ptr<StagingCache::Buffer>> StagingCache::Acquire(uint64_t size, bool zeroed) {
  const uint64_t capacity = CapacityFor(std::max<uint64_t>(size, 1));
  std::unique_ptr<Buffer> b(new Buffer());
  b->cache_ = shared_from_this();
  if (TakeCached(capacity, b.get())) {
    if (zeroed) memset(b->data_, 0, size);
    return b;
  }
  // Fresh anonymous memory reads as zeros; faulted in now, in one go.
  void *p = mmap(nullptr, capacity, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) return Status::Error(ENOMEM, "no memory for a staging buffer");
  b->data_ = static_cast<uint8_t *>(p);
  b->capacity_ = capacity;
  // Registered once for its whole life: RDMA transports need it, and UCX
  // would otherwise register the buffer on every transfer.
  MutexLock lock(&mu_);
  if (!context_) return b;
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = p;
  mp.length = capacity;
  if (ucp_mem_map(context_, &mp, &b->memh_) != UCS_OK) b->memh_ = nullptr;
  return b;
}

void StagingCache::Return(uint8_t *data, uint64_t capacity, ucp_mem_h memh) {
  MutexLock lock(&mu_);
  const Free f{data, capacity, memh};
  if (!context_ || capacity > max_cached_bytes_) return Destroy(f);
  free_.push_back(f);
  cached_bytes_ += capacity;
  // Over the bound: the least recently returned go first.
  while (cached_bytes_ > max_cached_bytes_) {
    Destroy(free_.front());
    cached_bytes_ -= free_.front().capacity;
    free_.erase(free_.begin());
  }
}

uint64_t StagingCache::reused() const {
  MutexLock lock(&mu_);
  return reused_;
}

uint64_t StagingCache::cached_bytes() const {
  MutexLock lock(&mu_);
  return cached_bytes_;
}

StagingCache::Buffer::~Buffer() {
  if (data_) cache_->Return(data_, capacity_, memh_);
}

}  // namespace maru
