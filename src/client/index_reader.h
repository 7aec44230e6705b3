// IndexReader: a client's view of the shared-memory index its server
// publishes (layout: proto/index_layout.h, server: meta/shm_index.h).
//
// Lookup finds a sealed chunk by path with the permission checks the server
// would make, or says that only the server can answer. Take leases the
// version found by writing its generation into a slot of this session's
// region, then checks that the index still names it; Drop clears the slot.
// No lock is shared with the server; threads of one process share the
// reader. Slots are handed out from free lists sharded by thread, a cache
// line of slots at a time, so that threads on different cores neither wait
// for one lock nor write the same line of slots.
#pragma once

#include <atomic>
#include <memory>
#include <string_view>
#include <vector>

#include "proto/index_layout.h"
#include "proto/maru.pb.h"
#include "util/mutex.h"

namespace maru {

// The pool's region for the index, in this process's mapping of the pool
// (its first device, where the superblock says); null: none.
struct PoolIndex {
  void *base = nullptr;
  size_t bytes = 0;
};

class IndexReader {
 public:
  // The index the session reply names, mapped; null when there is none, or
  // this process may not open it (not in the pool's group), or may not
  // write lease slots (it may not write the pool either). `flush`: the
  // pool's hosts do not keep caches coherent (PoolMap::flush), so what is
  // read is invalidated first and what is written is flushed. An index the
  // reply says is in the pool is read from `pool`, whatever the transport.
  static std::unique_ptr<IndexReader> Attach(const rpc::OpenSessionReply &session, bool flush,
                                             const PoolIndex &pool);
  ~IndexReader();
  IndexReader(const IndexReader &) = delete;
  IndexReader &operator=(const IndexReader &) = delete;

  enum class Found {
    kHit,     // a sealed chunk this process may read
    kMiss,    // no sealed chunk there: the server would refuse too
    kDenied,  // one this process may not read (EACCES)
    kAsk,     // only the server can tell (not entered, ancestors not open to all, ...)
  };
  struct Hit {
    index::EntryData entry;
    uint64_t seq = 0;
    uint64_t pos = 0;
  };
  // The key of `path`, which must be canonical ("/a/b": absolute, no empty
  // or dot components), and a prefetch of its home entries: a batch finds
  // the keys of all its paths first, so that the entries are on their way
  // while it hashes (a lookup that read an entry right after hashing its
  // path waited on memory for a third of its time).
  struct Key {
    uint64_t words[2];
  };
  Key KeyOf(std::string_view path) const;
  Found Lookup(const Key &key, Hit *hit) const;
  // Leases the version of `hit` in `slot` (one of FreeSlots'): false when
  // the entry changed meanwhile (the slot is then dropped, or left out of
  // use if the region is no longer this session's; ask the server). The
  // caller then notes the read (NoteReads).
  bool Take(const Hit &hit, int slot);
  void Drop(int slot, uint64_t gen) { Drop(&slot, &gen, 1); }
  // Drop() of slots[0..n), gens[i] the version slots[i] leases: the slots
  // go back to this thread's free list under one hold of its lock.
  void Drop(const int *slots, const uint64_t *gens, size_t n);
  // Up to `n` free slots for this thread (fewer when every slot is in
  // use), taken under one hold of its shard's lock; those a caller does
  // not Take go back with GiveBack.
  size_t FreeSlots(size_t n, int *out) EXCLUDES(grow_mu_);
  void GiveBack(const int *slots, size_t n);
  // Tells the server's eviction order that hits[0..n) were read now (a
  // ring in the region, drained by the server before it picks victims).
  // The server takes a note only if its stamp is newer than the newest it
  // took, so each block of ring places is stamped with a clock read right
  // before its notes are written (~40 ns a read on this VM: once a block,
  // not once a note), plus one per note.
  void NoteReads(const Hit *hits, size_t n);
  // This is the server's current index and the region is still this
  // session's: leases in its slots hold.
  bool Live() const;
  uint64_t instance() const { return instance_; }
  uint32_t region() const { return region_number_; }
  uint64_t token() const { return token_; }

 private:
  IndexReader() = default;
  // Attach, once the index is mapped at [base, base+bytes): checks what
  // the header says (the pool's group may write it) before using it.
  // `owned`: this reader's own mapping, unmapped with it.
  static std::unique_ptr<IndexReader> AttachAt(const rpc::OpenSessionReply &session, bool flush,
                                               void *base, size_t bytes, bool owned);
  bool MayRead(const index::EntryData &e) const;
  // Takes this process's uid, gid and groups as the caller's.
  void IdentityOfProcess();
  // A free slot for this thread, or -1 (every slot is in use).
  int FreeSlot() EXCLUDES(grow_mu_);

  static constexpr uint32_t kShards = 8;
  static constexpr uint32_t kSlotsPerLine = 64 / sizeof(uint64_t);
  struct alignas(64) Shard {
    Mutex mu;
    std::vector<uint32_t> free GUARDED_BY(mu);
  };

  void *base_ = nullptr;
  void *mapped_ = nullptr;  // base_, when this reader mapped it (a file)
  size_t bytes_ = 0;
  const index::Header *header_ = nullptr;
  const index::Entry *entries_ = nullptr;
  index::Region *region_ = nullptr;
  uint64_t mask_ = 0, instance_ = 0, token_ = 0;
  uint64_t serial_ = 0;  // unique in the process, never 0
  uint32_t region_number_ = 0, slots_ = 0;
  uint32_t uid_ = 0, gid_ = 0;
  bool flush_ = false;
  std::vector<uint32_t> groups_;
  Shard shards_[kShards];
  Mutex grow_mu_;
  uint32_t next_slot_ GUARDED_BY(grow_mu_) = 0;  // slots below it were handed to a shard
};

}  // namespace maru
