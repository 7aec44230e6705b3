#include "meta/lease_slots.h"

#include <sys/random.h>

#include <algorithm>

#include "util/clock.h"

namespace maru {

LeaseSlots::LeaseSlots(void *base, const index::Layout &layout) : base_(base), layout_(layout) {
  for (uint32_t r = layout.regions; r > 0; --r) free_.push_back(r - 1);
}

// Every slot and note, not only as far as the client's `used` and head
// say: a former owner may have written past them, and its notes may carry
// any stamp (a forged one far ahead made the next owner's reads look old,
// so that eviction ignored them).
void LeaseSlots::Clear(index::Region *r) {
  r->owner.store(0, std::memory_order_seq_cst);
  index::Written(&r->owner, sizeof(r->owner), layout_.flush);  // its client lets go first
  r->limit.store(0, std::memory_order_relaxed);
  for (uint64_t i = 0; i < layout_.slots_per_region; ++i)
    r->slots[i].store(0, std::memory_order_relaxed);
  index::ReadNote *ring = index::Ring(r);
  for (uint32_t i = 0; i < index::kRingSize; ++i) {
    ring[i].stamp_ns.store(0, std::memory_order_relaxed);
    ring[i].pos.store(0, std::memory_order_relaxed);
    ring[i].gen.store(0, std::memory_order_relaxed);
  }
  r->used.store(0, std::memory_order_seq_cst);
  r->reads_head.store(0);
  index::Written(r, index::kRegionBytes, layout_.flush);
}

LeaseSlots::Assigned LeaseSlots::Assign(uint64_t session, uint32_t uid, uint32_t limit) {
  uint32_t region;
  if (auto it = by_session_.find(session); it != by_session_.end()) {
    region = it->second.region;
  } else {
    // Root's sessions (maru-fuse, agents) are few and not capped.
    if (free_.empty() || (uid != 0 && max_per_uid_ && per_uid_[uid] >= max_per_uid_)) return {};
    region = free_.back();
    free_.pop_back();
    ++per_uid_[uid];
  }
  limit = std::min(limit, layout_.slots_per_region);
  by_session_[session] = Assignment{region, limit, uid};
  index::Region *r = At(region);
  Clear(r);
  drained_[region] = Drained{0, static_cast<uint64_t>(MonotonicNs())};
  r->limit.store(limit, std::memory_order_seq_cst);  // before the owner: the client reads it after
  index::Written(&r->limit, sizeof(r->limit), layout_.flush);
  // A random token, not the session id: every member of the pool's group
  // reads the regions, and a session id names a session.
  uint64_t token = 0;
  while (token == 0)
    if (getrandom(&token, sizeof(token), 0) != sizeof(token)) token = session ^ 0x9e3779b97f4a7c15;
  r->owner.store(token, std::memory_order_seq_cst);
  index::Written(&r->owner, sizeof(r->owner), layout_.flush);
  return {region + 1, token};
}

void LeaseSlots::Drop(uint64_t session) {
  auto it = by_session_.find(session);
  if (it == by_session_.end()) return;
  const uint32_t region = it->second.region;
  Clear(At(region));
  drained_.erase(region);
  free_.push_back(region);
  if (auto u = per_uid_.find(it->second.uid); u != per_uid_.end() && --u->second == 0)
    per_uid_.erase(u);
  by_session_.erase(it);
}

uint64_t LeaseSlots::Scanned(const Assignment &a, const index::Region *r) const {
  // `used` is the client's word; a smaller one only hides its own reads, a
  // larger one is capped by the limit the server set. The slots below it
  // are read next: where the pool is not coherent, from memory, where the
  // client flushed them.
  index::Fresh(&r->used, sizeof(r->used), layout_.flush);
  const uint64_t scanned = std::min<uint64_t>(r->used.load(), a.limit);
  index::Fresh(&r->slots[0], scanned * sizeof(r->slots[0]), layout_.flush);
  return scanned;
}

bool LeaseSlots::Holds(uint64_t gen) const {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (const auto &[session, a] : by_session_) {
    const index::Region *r = At(a.region);
    const uint64_t scanned = Scanned(a, r);
    for (uint64_t i = 0; i < scanned; ++i)
      if (r->slots[i].load(std::memory_order_relaxed) == gen) return true;
  }
  return false;
}

std::vector<uint32_t> LeaseSlots::HoldersOf(uint64_t gen) const {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::vector<uint32_t> uids;
  for (const auto &[session, a] : by_session_) {
    const index::Region *r = At(a.region);
    const uint64_t scanned = Scanned(a, r);
    for (uint64_t i = 0; i < scanned; ++i)
      if (r->slots[i].load(std::memory_order_relaxed) == gen) {
        uids.push_back(a.uid);
        break;
      }
  }
  return uids;
}

size_t LeaseSlots::Held(uint64_t session) const {
  auto it = by_session_.find(session);
  if (it == by_session_.end()) return 0;
  const index::Region *r = At(it->second.region);
  const uint64_t scanned = Scanned(it->second, r);
  size_t held = 0;
  for (uint64_t i = 0; i < scanned; ++i) held += r->slots[i].load(std::memory_order_relaxed) != 0;
  return held;
}

std::vector<LeaseSlots::Read> LeaseSlots::DrainReads() {
  std::vector<Read> reads;
  const uint64_t now = static_cast<uint64_t>(MonotonicNs());
  for (const auto &[session, a] : by_session_) {
    const uint32_t region = a.region;
    index::Region *r = At(region);
    const index::ReadNote *ring = index::Ring(r);
    // The head is the client's word: at most one ring's worth is read.
    index::Fresh(&r->reads_head, sizeof(r->reads_head), layout_.flush);
    index::Fresh(ring, index::kRingSize * sizeof(*ring), layout_.flush);
    const uint64_t head = r->reads_head.load(std::memory_order_acquire);
    Drained &d = drained_[region];
    if (head < d.from) d.from = head;
    // Places taken before the last drain may have been written since (a
    // thread's block fills over time): read some again; the stamps tell
    // which notes are new.
    uint64_t at = d.from - std::min<uint64_t>(d.from, kReread);
    if (head - at > index::kRingSize) at = head - index::kRingSize;
    uint64_t newest = d.stamp_ns;
    for (; at < head; ++at) {
      const index::ReadNote &n = ring[at % index::kRingSize];
      const uint64_t stamp = n.stamp_ns.load(std::memory_order_acquire);
      if (stamp <= d.stamp_ns) continue;  // taken already, or not written yet
      if (stamp > now) continue;          // no read happens later than now: a forged stamp
      reads.push_back(
          {stamp, n.pos.load(std::memory_order_relaxed), n.gen.load(std::memory_order_relaxed)});
      newest = std::max(newest, stamp);
    }
    d.from = head;
    d.stamp_ns = newest;
  }
  std::sort(reads.begin(), reads.end(),
            [](const Read &a, const Read &b) { return a.stamp_ns < b.stamp_ns; });
  return reads;
}

}  // namespace maru
