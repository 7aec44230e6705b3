// The records of the leases a client tracks (one shard of MetaClient's):
// each at a fixed address until it is erased, since a LeaseWatch reads it
// without a lock; found from its handle by index, not by hashing; reused
// through a free list. A std::unordered_map spent a heap node per lease, a
// malloc and a free for each of a 128-key lookup's leases. Blocks of
// records are kept for reuse, never returned: the memory follows the most
// leases the shard ever held. Not thread-safe: its shard's lock guards it.
#pragma once

#include <atomic>
#include <cassert>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

namespace maru {

class HeldLeases {
 public:
  // The low bits of a handle are the caller's tag (MetaClient's shard).
  static constexpr unsigned kTagBits = 3;

  struct Record {
    std::atomic<uint64_t> lease{0};  // read without a lock by MetaClient::LeaseHeld()
    uint64_t ino = 0, gen = 0;
    uint64_t handle = 0;  // 0: free
  };

  // A record under a new handle (never 0, below 2^63), `tag` < 2^kTagBits
  // in its low bits; null when the table cannot grow (out of memory, or
  // 2^24 records in use).
  Record *Add(uint64_t tag, uint64_t *handle) noexcept {
    assert(tag < (uint64_t{1} << kTagBits));
    uint32_t index;
    if (!free_.empty()) {
      index = free_.back();
      free_.pop_back();
    } else {
      if (used_ % kBlock == 0 && !Grow()) return nullptr;
      index = used_++;
    }
    // The serial makes a handle unique over time (2^36 of them), so that a
    // stale handle (a second release) finds its record gone, not a newer
    // lease in it.
    if (++serial_ >> kSerialBits) serial_ = 1;
    *handle = (serial_ << (kIndexBits + kTagBits)) | (uint64_t{index} << kTagBits) | tag;
    Record *r = At(index);
    r->handle = *handle;
    return r;
  }

  // The record of `handle`, or null if it was erased (or never made).
  Record *Find(uint64_t handle) {
    if (handle == 0) return nullptr;  // what a free record holds
    const uint64_t index = (handle >> kTagBits) & kIndexMask;
    if (index >= used_) return nullptr;
    Record *r = At(static_cast<uint32_t>(index));
    return r->handle == handle ? r : nullptr;
  }

  // Frees `r` (from Add or Find of this table). Never allocates.
  void Erase(Record *r) {
    const uint32_t index = static_cast<uint32_t>((r->handle >> kTagBits) & kIndexMask);
    r->handle = 0;
    r->lease.store(0, std::memory_order_relaxed);
    free_.push_back(index);  // room was reserved when its block was made
  }

  // Calls f(record) for each record in use.
  template <typename F>
  void ForEach(F &&f) {
    for (uint32_t i = 0; i < used_; ++i)
      if (Record *r = At(i); r->handle != 0) f(*r);
  }

 private:
  static constexpr uint32_t kBlock = 256;
  static constexpr unsigned kIndexBits = 24;  // records in use at once (a session holds 65536)
  static constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
  static constexpr unsigned kSerialBits = 63 - kIndexBits - kTagBits;

  Record *At(uint32_t index) { return &blocks_[index / kBlock][index % kBlock]; }

  // Room for kBlock more records, and for all of them on the free list (so
  // that Erase never allocates): false, the table unchanged, if there is none.
  bool Grow() noexcept {
    if (used_ + kBlock > kIndexMask + 1) return false;
    try {
      free_.reserve(used_ + kBlock);
      blocks_.reserve(blocks_.size() + 1);
      blocks_.push_back(std::make_unique<Record[]>(kBlock));
    } catch (const std::bad_alloc &) {
      return false;
    }
    return true;
  }

  std::vector<std::unique_ptr<Record[]>> blocks_;
  std::vector<uint32_t> free_;
  uint32_t used_ = 0;  // records handed out at least once
  uint64_t serial_ = 0;
};

}  // namespace maru
