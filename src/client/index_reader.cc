#include "client/index_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "util/clock.h"

namespace maru {

std::unique_ptr<IndexReader> IndexReader::Attach(const rpc::OpenSessionReply &session, bool flush,
                                                 const PoolIndex &pool) {
  if (session.index_region() == 0) return nullptr;
  if (session.index_in_pool()) {
    // In this process's own mapping of the pool, where its own read of
    // the superblock says: nothing to open or unmap.
    if (!pool.base || pool.bytes < index::kPage) return nullptr;
    return AttachAt(session, flush, pool.base, pool.bytes, false);
  }
  if (session.index_path().empty()) return nullptr;
  int fd = open(session.index_path().c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return nullptr;
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < index::kPage) {
    close(fd);
    return nullptr;
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  void *base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return nullptr;
  return AttachAt(session, flush, base, bytes, true);
}

std::unique_ptr<IndexReader> IndexReader::AttachAt(const rpc::OpenSessionReply &session, bool flush,
                                                   void *base, size_t bytes, bool owned) {
  std::unique_ptr<IndexReader> r(new IndexReader());
  if (owned) r->mapped_ = base;
  // Thread-locals name the reader by it: a reader's address, or its
  // region's, may be another's of the past (the same memory mapped anew).
  static std::atomic<uint64_t> readers{0};
  r->serial_ = readers.fetch_add(1, std::memory_order_relaxed) + 1;
  r->base_ = base;
  r->bytes_ = bytes;
  r->flush_ = flush;
  const auto *h = static_cast<const index::Header *>(base);
  index::Fresh(h, sizeof(*h), flush);
  r->header_ = h;
  // The file is the pool group's: check what it says before trusting sizes.
  const uint64_t region = session.index_region() - 1;
  if (h->magic != index::kMagic || h->version != index::kVersion ||
      h->instance != session.index_instance() || h->entries == 0 ||
      (h->entries & (h->entries - 1)) || h->slots_per_region > index::kSlotsPerRegion ||
      region >= h->regions || h->entries_offset != index::kPage ||
      h->entries > bytes / sizeof(index::Entry) ||
      h->regions_offset != index::kPage + h->entries * sizeof(index::Entry) ||
      index::FileBytes(h->entries, h->regions) > bytes)
    return nullptr;
  r->entries_ = index::Entries(base, *h);
  r->region_ = index::RegionAt(base, *h, static_cast<uint32_t>(region));
  r->mask_ = h->entries - 1;
  r->instance_ = h->instance;
  r->token_ = session.index_token();
  r->region_number_ = session.index_region();
  r->slots_ = h->slots_per_region;  // and at most the region's limit, below
  if (session.index_in_pool()) {
    // The identity the server named: a token's, over TCP.
    r->uid_ = session.index_uid();
    r->gid_ = session.index_gid();
    r->groups_.assign(session.index_groups().begin(), session.index_groups().end());
  } else {
    r->IdentityOfProcess();
  }
  if (!r->Live()) return nullptr;
  // Written before the owner: what the server honours (--max-leases).
  r->slots_ = static_cast<uint32_t>(std::min<uint64_t>(r->slots_, r->region_->limit.load()));
  return r;
}

void IndexReader::IdentityOfProcess() {
  // What the server sees on this process's socket (SO_PEERCRED).
  uid_ = geteuid();
  gid_ = getegid();
  int n = getgroups(0, nullptr);
  if (n > 0) {
    std::vector<gid_t> g(static_cast<size_t>(n));
    n = getgroups(n, g.data());
    for (int i = 0; i < n; ++i) groups_.push_back(g[static_cast<size_t>(i)]);
  }
}

IndexReader::~IndexReader() {
  if (mapped_) munmap(mapped_, bytes_);
}

bool IndexReader::Live() const {
  index::Fresh(&header_->state, sizeof(header_->state), flush_);
  index::Fresh(&region_->owner, sizeof(region_->owner), flush_);
  // The instance too: a server that restarts on a pool's region writes a
  // new one over the same memory.
  return header_->state.load(std::memory_order_acquire) == index::kLive &&
         header_->instance == instance_ && region_->owner.load(std::memory_order_acquire) == token_;
}

// The mode bits, as the server's MayAccess reads them.
bool IndexReader::MayRead(const index::EntryData &e) const {
  if (uid_ == 0) return true;
  uint32_t bits;
  if (uid_ == e.uid)
    bits = e.mode >> 6;
  else if (gid_ == e.gid || std::find(groups_.begin(), groups_.end(), e.gid) != groups_.end())
    bits = e.mode >> 3;
  else
    bits = e.mode;
  return (bits & 4) != 0;
}

IndexReader::Key IndexReader::KeyOf(std::string_view path) const {
  Key key;
  index::PathKey(header_->key, path, key.words);
  const index::Entry *home = &entries_[key.words[0] & mask_];
  __builtin_prefetch(home);
  __builtin_prefetch(reinterpret_cast<const char *>(home) + 64);
  return key;
}

IndexReader::Found IndexReader::Lookup(const Key &k, Hit *hit) const {
  const uint64_t *key = k.words;
  // Read before the entries: an overflow counted later is a newer change.
  index::Fresh(&header_->overflow, sizeof(header_->overflow), flush_);
  const bool complete = header_->overflow.load(std::memory_order_acquire) == 0;
  for (uint64_t i = 0; i < index::kMaxProbe; ++i) {
    const uint64_t pos = (key[0] + i) & mask_;
    index::EntryData &e = hit->entry;
    int tries = 0;
    while (!index::ReadEntry(entries_[pos], &e, &hit->seq, flush_))
      if (++tries > 1000) return Found::kAsk;  // the server is stuck mid-write
    if (e.flags & index::kUsed) {
      if (e.key[0] != key[0] || e.key[1] != key[1]) continue;
      hit->pos = pos;
      if (!(e.flags & index::kPathOpen) ||
          (e.flags & (index::kNoExtents | index::kChanging | index::kManyParts)) ||
          e.extent_count == 0 || e.extent_count > index::kInlineExtents)
        return Found::kAsk;
      return MayRead(e) ? Found::kHit : Found::kDenied;
    }
    if (!(e.flags & index::kTombstone)) return complete ? Found::kMiss : Found::kAsk;
  }
  return complete ? Found::kMiss : Found::kAsk;
}

namespace {
// This thread's shard: threads are spread over the shards as they come.
uint32_t ThreadShard(uint32_t shards) {
  static std::atomic<uint32_t> threads{0};
  thread_local const uint32_t me = threads.fetch_add(1, std::memory_order_relaxed);
  return me % shards;
}
}  // namespace

int IndexReader::FreeSlot() {
  const uint32_t mine = ThreadShard(kShards);
  Shard &shard = shards_[mine];
  {
    MutexLock lock(&shard.mu);
    if (!shard.free.empty()) {
      const uint32_t slot = shard.free.back();
      shard.free.pop_back();
      return static_cast<int>(slot);
    }
  }
  {
    MutexLock lock(&grow_mu_);
    if (next_slot_ < slots_) {
      // A line of slots for this shard alone.
      const uint32_t from = next_slot_,
                     to = std::min(slots_, (from / kSlotsPerLine + 1) * kSlotsPerLine);
      next_slot_ = to;
      // Published before the slots are used: the server scans this far.
      // Seq_cst, like Take's exchange and re-read: Take has no fence of its
      // own, so this store must be in the same order as the server's fence.
      region_->used.store(next_slot_, std::memory_order_seq_cst);
      index::Written(&region_->used, sizeof(region_->used), flush_);
      MutexLock lock2(&shard.mu);
      for (uint32_t s = to - 1; s > from; --s) shard.free.push_back(s);
      return static_cast<int>(from);
    }
  }
  // Every slot was handed out: take one another shard holds free.
  for (uint32_t i = 1; i < kShards; ++i) {
    Shard &other = shards_[(mine + i) % kShards];
    MutexLock lock(&other.mu);
    if (!other.free.empty()) {
      const uint32_t slot = other.free.back();
      other.free.pop_back();
      return static_cast<int>(slot);
    }
  }
  return -1;
}

size_t IndexReader::FreeSlots(size_t n, int *out) {
  size_t got = 0;
  {
    Shard &shard = shards_[ThreadShard(kShards)];
    MutexLock lock(&shard.mu);
    for (; got < n && !shard.free.empty(); ++got) {
      out[got] = static_cast<int>(shard.free.back());
      shard.free.pop_back();
    }
  }
  for (; got < n; ++got) {
    const int slot = FreeSlot();
    if (slot < 0) break;
    out[got] = slot;
  }
  return got;
}

void IndexReader::GiveBack(const int *slots, size_t n) {
  if (n == 0) return;
  Shard &shard = shards_[ThreadShard(kShards)];
  MutexLock lock(&shard.mu);
  for (size_t i = 0; i < n; ++i) shard.free.push_back(static_cast<uint32_t>(slots[i]));
}

bool IndexReader::Take(const Hit &hit, int slot) {
  const uint64_t gen = hit.entry.gen;
  uint64_t expected = 0;
  // A compare-exchange, not a store: if the region was handed to another
  // session, its slots are not ours to overwrite.
  if (!region_->slots[slot].compare_exchange_strong(expected, gen, std::memory_order_seq_cst))
    return false;  // the slot stays out of use
  // Where the pool is not coherent the order above is made by hand: the
  // slot in memory, then the entry's version read from memory.
  index::Written(&region_->slots[slot], sizeof(region_->slots[slot]), flush_);
  index::Fresh(&entries_[hit.pos].seq, sizeof(entries_[hit.pos].seq), flush_);
  // The server takes a version out of the index, then a seq_cst fence, then
  // scans the slots (LeaseSlots::Holds): seeing the entry unchanged now, in
  // a seq_cst load after the seq_cst exchange, means the scan will see this
  // slot. (No fence of our own is needed between the two: both are seq_cst
  // operations, and on x86 the locked exchange is one already. So both, and
  // FreeSlot's store of `used`, must stay seq_cst.)
  const bool same = entries_[hit.pos].seq.load(std::memory_order_seq_cst) == hit.seq;
  if (same && Live()) return true;
  // Undone, live or not: the generation there is the one just written.
  expected = gen;
  region_->slots[slot].compare_exchange_strong(expected, 0, std::memory_order_release);
  index::Written(&region_->slots[slot], sizeof(region_->slots[slot]), flush_);
  GiveBack(&slot, 1);
  return false;
}

void IndexReader::NoteReads(const Hit *hits, size_t n) {
  // This thread's block of ring places (of this reader's region: a block
  // taken in another reader's region is left, which only loses its unused
  // places). Named by the reader's serial, not the region's address: a
  // region mapped where an earlier one was would take up that one's block,
  // whose places this ring may have passed (its notes then lost).
  struct Block {
    uint64_t reader = 0;
    uint64_t next = 0, end = 0;
  };
  thread_local Block block;
  // Worked on in a copy, written back once: GCC looks a thread_local up
  // again after every call (the clock's), each a call into the linker.
  Block b = block;
  index::ReadNote *ring = index::Ring(region_);
  uint64_t stamp = 0;
  for (size_t i = 0; i < n; ++i) {
    if (b.reader != serial_ || b.next == b.end) {
      b.reader = serial_;
      b.next = region_->reads_head.fetch_add(index::kNoteBlock, std::memory_order_relaxed);
      index::Written(&region_->reads_head, sizeof(region_->reads_head), flush_);
      b.end = b.next + index::kNoteBlock;
      stamp = 0;
    }
    // A note written long after its stamp was read may be older than one
    // the server took meanwhile: a fresh stamp for each block.
    if (stamp == 0) stamp = static_cast<uint64_t>(MonotonicNs());
    index::ReadNote &note = ring[b.next++ % index::kRingSize];
    note.pos.store(hits[i].pos, std::memory_order_relaxed);
    note.gen.store(hits[i].entry.gen, std::memory_order_relaxed);
    note.stamp_ns.store(stamp++, std::memory_order_release);
    index::Written(&note, sizeof(note), flush_);
  }
  block = b;
}

void IndexReader::Drop(const int *slots, const uint64_t *gens, size_t n) {
  // A region no longer this session's (taken back, or emptied by a server
  // that restarted on the pool's region) may hold another session's lease
  // of the same version in the same slot: that is not ours to clear.
  const bool live = Live();
  for (size_t i = 0; live && i < n; ++i) {
    uint64_t expected = gens[i];
    region_->slots[slots[i]].compare_exchange_strong(expected, 0, std::memory_order_release);
    index::Written(&region_->slots[slots[i]], sizeof(uint64_t), flush_);
  }
  GiveBack(slots, n);
}

}  // namespace maru
