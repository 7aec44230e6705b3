// The shared-memory index: the layout maru-server publishes next to the pool
// and clients read, so that a lookup, an open and a release need no message
// (docs/design.md, "The index in shared memory").
//
// One file, three parts, all little-endian words:
//   Header   one page: what the rest is, which server wrote it, live or dead;
//   entries  an open-addressing hash table of sealed chunks, keyed by a keyed
//            128-bit hash of the absolute path; each entry is a seqlock
//            (even: stable) so that a reader never acts on a half-written one;
//   regions  one per session: lease slots a client fills with the generation
//            it reads, which the server scans before it reuses extents.
// The server is the only writer of the header and the entries; a client
// writes only the slots of its own region.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "util/cache_flush.h"

namespace maru::index {

constexpr uint64_t kMagic = 0x3158444955524d41ull;  // "AMRUIDX1"
constexpr uint32_t kVersion = 3;                    // 2: a region's `limit`; 3: SipHash-1-3
constexpr uint32_t kInlineExtents = 2;
constexpr uint32_t kMaxProbe = 32;  // a key is within this many entries of its home
constexpr uint64_t kPage = 4096;
constexpr uint64_t kRegionBytes = 16384;  // slots, then the ring of reads
constexpr uint64_t kRingOffset = 8192;
constexpr uint32_t kRingSize = 256;

enum State : uint32_t { kStarting = 0, kLive = 1, kDead = 2 };

struct Header {
  uint64_t magic;
  uint32_t version;
  std::atomic<uint32_t> state;  // kDead once a newer server replaced this file
  uint64_t instance;            // random, new at every server start
  uint64_t key[2];              // the path hash's key
  uint64_t entries;             // a power of two
  uint64_t entries_offset;
  uint32_t regions, slots_per_region;
  uint64_t regions_offset;
  // Sealed chunks that could not be entered (table full): while nonzero a
  // miss proves nothing and a reader asks the server.
  std::atomic<uint64_t> overflow;
};
static_assert(sizeof(Header) <= kPage);

// Entry flags.
constexpr uint32_t kUsed = 1;        // holds a chunk
constexpr uint32_t kTombstone = 2;   // held one: probing goes on past it
constexpr uint32_t kPathOpen = 4;    // every directory above it is searchable by all (o+x)
constexpr uint32_t kNoExtents = 8;   // more extents than fit inline: ask the server
constexpr uint32_t kChanging = 16;   // its version is going mid-operation: ask the server
constexpr uint32_t kManyParts = 32;  // written in parts (layer-wise), a count no entry holds: ask

// An entry, as words. `seq` is odd while the server rewrites the entry.
struct Entry {
  std::atomic<uint64_t> seq;
  std::atomic<uint64_t> w[15];
};
static_assert(sizeof(Entry) == 128);

// The words of an entry, decoded.
struct EntryData {
  uint64_t key[2];
  uint64_t ino, gen, size;
  uint32_t uid, gid, mode, flags;
  uint32_t checksum_type, extent_count;
  uint64_t checksum;
  struct {
    uint64_t device, offset, length;
  } extents[kInlineExtents];
};
static_assert(sizeof(EntryData) == 15 * 8);

// A session's region. Its first cache line is read on every lookup (owner)
// and written rarely; the ring's head, which every noted read moves, has a
// line of its own, so that one does not slow the other across cores.
struct Region {
  std::atomic<uint64_t> owner;  // a token of the session it belongs to; 0: none
  std::atomic<uint64_t> used;   // a client's bound on the slots it ever used
  // The slots the server honours for this session (written before `owner`):
  // at most --max-leases. A slot past it holds nothing.
  std::atomic<uint64_t> limit;
  uint64_t reserved0[5];
  std::atomic<uint64_t> reads_head;  // ring places taken so far (the ring's next place)
  uint64_t reserved1[7];
  std::atomic<uint64_t> slots[];  // generations held; 0: free
};
static_assert(sizeof(Region) == 128);
constexpr uint32_t kSlotsPerRegion = (kRingOffset - sizeof(Region)) / sizeof(uint64_t);

// A read through the index, noted by the client for the server's eviction
// order (what an open by message does: hits, atime, recency). A ring per
// region; a note overwritten before the server drained it is lost, which
// only blurs the order. A thread of the client takes ring places a block at
// a time (kNoteBlock, one move of `reads_head`), so that threads on other
// cores neither move one counter per read nor write one line of notes; the
// stamp, written last, tells the server which notes are new (a place taken
// but not yet written holds an older stamp).
constexpr uint32_t kNoteBlock = 8;
struct ReadNote {
  std::atomic<uint64_t> pos, gen, stamp_ns, reserved;
};
static_assert(kRingSize % kNoteBlock == 0);
static_assert(kRingOffset + kRingSize * sizeof(ReadNote) <= kRegionBytes);
inline ReadNote *Ring(Region *r) {
  return reinterpret_cast<ReadNote *>(reinterpret_cast<char *>(r) + kRingOffset);
}

inline Entry *Entries(void *base, const Header &h) {
  return reinterpret_cast<Entry *>(static_cast<char *>(base) + h.entries_offset);
}
inline Region *RegionAt(void *base, const Header &h, uint32_t region) {
  return reinterpret_cast<Region *>(static_cast<char *>(base) + h.regions_offset +
                                    static_cast<uint64_t>(region) * kRegionBytes);
}
inline uint64_t FileBytes(uint64_t entries, uint32_t regions) {
  return kPage + entries * sizeof(Entry) + static_cast<uint64_t>(regions) * kRegionBytes;
}

// The server's defaults, which `maructl mkpool` sizes a pool's index region
// for: entries twice the pool's allocation units (a power of two, 4Ki to
// 4Mi), and regions for this many sessions.
constexpr uint32_t kDefaultRegions = 256;
inline uint64_t DefaultEntries(uint64_t units) {
  const uint64_t want = units < 2048 ? 4096 : units > (2u << 20) ? 4u << 20 : units * 2;
  uint64_t n = 1;
  while (n < want) n <<= 1;
  return n;
}
// The bytes of an index with the server's defaults for a pool of `units`.
inline uint64_t DefaultBytes(uint64_t units) {
  return FileBytes(DefaultEntries(units), kDefaultRegions);
}

// Where the parts of an index file lie, as its server made it. The server
// keeps this in its own memory and never reads the Header back: the
// Header is for clients, and every member of the pool's group may write
// it (a forged `regions_offset` once had the server write a token into its
// own stack). Every place is computed from these values alone.
struct Layout {
  uint64_t entries = 0;  // a power of two
  uint32_t regions = 0;
  uint32_t slots_per_region = kSlotsPerRegion;
  // The pool's hosts do not keep caches coherent (Coherence::kFlush): what
  // the server writes here is flushed, what it reads is invalidated first.
  bool flush = false;
  uint64_t entries_offset() const { return kPage; }
  uint64_t regions_offset() const { return kPage + entries * sizeof(Entry); }
  uint64_t bytes() const { return FileBytes(entries, regions); }
};
inline Entry *Entries(void *base, const Layout &l) {
  return reinterpret_cast<Entry *>(static_cast<char *>(base) + l.entries_offset());
}
// `region` < l.regions: the caller checks it against its own count.
inline Region *RegionAt(void *base, const Layout &l, uint32_t region) {
  return reinterpret_cast<Region *>(static_cast<char *>(base) + l.regions_offset() +
                                    static_cast<uint64_t>(region) * kRegionBytes);
}

// What `flush` does to a word of the index another host reads: writes its
// line back after a store (Write), drops this CPU's copy before a load
// (Fresh), so that the load reads memory. Nothing when the hardware keeps
// caches coherent (flush false).
inline void Written(const void *p, size_t len, bool flush) {
  if (flush) FlushRange(p, len);
}
inline void Fresh(const void *p, size_t len, bool flush) {
  if (flush) InvalidateRange(p, len);
}

// A stable copy of `e`, or false if the server was writing it. With
// `flush` (no hardware coherence) the entry is read from memory and its
// version read again from memory after the words: the writer put the odd
// version there before the words, and the words before the even one.
inline bool ReadEntry(const Entry &e, EntryData *out, uint64_t *seq, bool flush = false) {
  Fresh(&e, sizeof(e), flush);
  const uint64_t before = e.seq.load(std::memory_order_acquire);
  if (before & 1) return false;
  uint64_t words[15];
  for (int i = 0; i < 15; ++i) words[i] = e.w[i].load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  Fresh(&e.seq, sizeof(e.seq), flush);
  if (e.seq.load(std::memory_order_relaxed) != before) return false;
  std::memcpy(out, words, sizeof(words));
  *seq = before;
  return true;
}

// Rewrites `e` (the server, the only writer). The old `seq` is made odd
// first, whatever it held, so that the entry ends even (stable) even if
// someone else wrote an odd one.
// With `flush`, each step reaches memory before the next begins.
inline void WriteEntry(Entry *e, const EntryData &data, bool flush = false) {
  uint64_t words[15];
  std::memcpy(words, &data, sizeof(words));
  const uint64_t seq = e->seq.load(std::memory_order_relaxed) | 1;
  e->seq.store(seq, std::memory_order_relaxed);
  Written(&e->seq, sizeof(e->seq), flush);
  std::atomic_thread_fence(std::memory_order_release);
  for (int i = 0; i < 15; ++i) e->w[i].store(words[i], std::memory_order_relaxed);
  Written(e, sizeof(*e), flush);
  e->seq.store(seq + 1, std::memory_order_release);
  Written(&e->seq, sizeof(e->seq), flush);
}

// SipHash-1-3 with a 128-bit result: the key of a path, and its identity
// in the index (entries hold no path). Keyed so that keys differ per server
// start and no one outside the pool's group, who cannot read the key, can
// compute keys at all: to them two paths share one with odds of 2^-128 a
// pair, and they cannot pick paths that crowd one home. The group can read
// the key, but it also reads and writes every byte of the pool
// (docs/design.md, "Trust model"): a collision it made would give it
// nothing it has not. One compression round a word and three to finish,
// as Python's and Rust's hash tables use (the 2-4 rounds took a sixth of a
// batched lookup).
namespace detail {
inline uint64_t Rotl(uint64_t x, int b) {
  return (x << b) | (x >> (64 - b));
}
inline void SipRound(uint64_t &v0, uint64_t &v1, uint64_t &v2, uint64_t &v3) {
  v0 += v1;
  v1 = Rotl(v1, 13);
  v1 ^= v0;
  v0 = Rotl(v0, 32);
  v2 += v3;
  v3 = Rotl(v3, 16);
  v3 ^= v2;
  v0 += v3;
  v3 = Rotl(v3, 21);
  v3 ^= v0;
  v2 += v1;
  v1 = Rotl(v1, 17);
  v1 ^= v2;
  v2 = Rotl(v2, 32);
}
}  // namespace detail

inline void PathKey(const uint64_t key[2], std::string_view path, uint64_t out[2]) {
  uint64_t v0 = 0x736f6d6570736575ull ^ key[0], v1 = 0x646f72616e646f6dull ^ key[1] ^ 0xee;
  uint64_t v2 = 0x6c7967656e657261ull ^ key[0], v3 = 0x7465646279746573ull ^ key[1];
  const size_t n = path.size();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t m;
    std::memcpy(&m, path.data() + i, 8);
    v3 ^= m;
    detail::SipRound(v0, v1, v2, v3);
    v0 ^= m;
  }
  uint64_t last = static_cast<uint64_t>(n) << 56;
  for (size_t j = 0; i + j < n; ++j) last |= static_cast<uint64_t>(uint8_t(path[i + j])) << (8 * j);
  v3 ^= last;
  detail::SipRound(v0, v1, v2, v3);
  v0 ^= last;
  v2 ^= 0xee;
  for (int r = 0; r < 3; ++r) detail::SipRound(v0, v1, v2, v3);
  out[0] = v0 ^ v1 ^ v2 ^ v3;
  v1 ^= 0xdd;
  for (int r = 0; r < 3; ++r) detail::SipRound(v0, v1, v2, v3);
  out[1] = v0 ^ v1 ^ v2 ^ v3;
  if (out[0] == 0 && out[1] == 0) out[1] = 1;  // (0, 0) marks nothing
}

}  // namespace maru::index
