#include "alloc/pool_control.h"

#include <cstdio>
#include <cstring>

#include "util/cache_flush.h"

namespace maru {

// On-device layout of the control page. Atomics of 8 bytes are lock-free
// on every CPU Maru runs on, so they work across processes and hosts.
struct PoolControl::Page {
  std::atomic<uint64_t> fence_epoch;
  std::atomic<uint64_t> leader_seq;  // odd while the record below changes
  std::atomic<int64_t> heartbeat_ns;
  uint64_t leader_epoch;
  char leader_id[64];
  char leader_endpoint[256];
};
static_assert(sizeof(PoolControl::Page) <= kControlBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

Result<PoolControl> PoolControl::At(uint8_t *base, const Superblock &sb) {
  if (sb.control_offset == 0)
    return Status::Error(EINVAL,
                         "the pool has no control page (formatted by an older maructl; "
                         "reformat it with maructl mkpool --force to lead it with standbys)");
  return PoolControl(reinterpret_cast<Page *>(base + sb.control_offset),
                     sb.coherence == Coherence::kFlush);
}

uint64_t PoolControl::FenceEpoch() const {
  if (flush_) InvalidateRange(&page_->fence_epoch, sizeof(page_->fence_epoch));
  return page_->fence_epoch.load(std::memory_order_acquire);
}

Status PoolControl::RaiseFence(uint64_t epoch) {
  uint64_t now = FenceEpoch();
  while (now < epoch) {
    if (page_->fence_epoch.compare_exchange_weak(now, epoch, std::memory_order_acq_rel)) {
      if (flush_) FlushRange(&page_->fence_epoch, sizeof(page_->fence_epoch));
      return Status::Ok();
    }
  }
  if (now == epoch) return Status::Ok();
  return Status::Error(ESTALE, "the pool is fenced at epoch " + std::to_string(now) +
                                   ", ahead of this server's " + std::to_string(epoch) +
                                   ": a newer leader exists");
}

void PoolControl::SetLeader(const LeaderRecord &leader) {
  const uint64_t seq = page_->leader_seq.load(std::memory_order_relaxed);
  page_->leader_seq.store(seq | 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  page_->leader_epoch = leader.epoch;
  snprintf(page_->leader_id, sizeof(page_->leader_id), "%s", leader.id.c_str());
  snprintf(page_->leader_endpoint, sizeof(page_->leader_endpoint), "%s", leader.endpoint.c_str());
  page_->heartbeat_ns.store(leader.heartbeat_ns, std::memory_order_relaxed);
  page_->leader_seq.store((seq | 1) + 1, std::memory_order_release);
  if (flush_) FlushRange(page_, sizeof(Page));
}

void PoolControl::Heartbeat(int64_t now_ns) {
  page_->heartbeat_ns.store(now_ns, std::memory_order_release);
  if (flush_) FlushRange(&page_->heartbeat_ns, sizeof(page_->heartbeat_ns));
}

LeaderRecord PoolControl::Leader() const {
  LeaderRecord r;
  // Bounded: the page is group-writable, and a writer may die halfway.
  for (int tries = 0; tries < 1000; ++tries) {
    if (flush_) InvalidateRange(page_, sizeof(Page));
    const uint64_t seq = page_->leader_seq.load(std::memory_order_acquire);
    if (seq & 1) continue;
    r.epoch = page_->leader_epoch;
    // The bytes are another process's: bounded copies, terminated here.
    char id[sizeof(page_->leader_id) + 1] = {};
    char endpoint[sizeof(page_->leader_endpoint) + 1] = {};
    memcpy(id, page_->leader_id, sizeof(page_->leader_id));
    memcpy(endpoint, page_->leader_endpoint, sizeof(page_->leader_endpoint));
    r.heartbeat_ns = page_->heartbeat_ns.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (page_->leader_seq.load(std::memory_order_relaxed) != seq) continue;
    r.id = id;
    r.endpoint = endpoint;
    return r;
  }
  r.epoch = FenceEpoch();
  return r;
}

}  // namespace maru
