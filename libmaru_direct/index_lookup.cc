#include "index_lookup.h"

#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "chunk_cache.h"
#include "chunk_handle.h"
#include "util/path.h"

using maru::MetaClient;

namespace maru::direct {
namespace {

// The largest batch whose working room a thread keeps between calls.
constexpr size_t kKeptBatch = 256;

// The index's key of `path` in `form`, its home entry prefetched: 0, or
// kAskServer when no entry can have it.
int KeyInIndex(const maru::IndexReader *ix, const char *path, PathForm form,
               maru::IndexReader::Key *key) {
  if (!path) return kAskServer;
  std::string_view as(path);
  if (as.size() > maru::kMaxPathLength) return kAskServer;  // no entry's
  if (form == PathForm::kCanonical) {
    thread_local std::string scratch;
    try {
      as = maru::CanonicalPath(path, &scratch);
    } catch (const std::bad_alloc &) {
      return kAskServer;  // nothing may throw into C; the server may have the memory
    }
    if (as.empty()) return kAskServer;
  }
  *key = ix->KeyOf(as);
  return 0;
}

// Finds the entry of `key`: 0 with it, -ENOENT or -EACCES when the index
// proves the server would refuse, kAskServer when only the server can tell.
int FindInIndex(const maru::IndexReader *ix, const maru::IndexReader::Key &key,
                maru::IndexReader::Hit *hit) {
  switch (ix->Lookup(key, hit)) {
    case maru::IndexReader::Found::kMiss:
      return -ENOENT;
    case maru::IndexReader::Found::kDenied:
      return -EACCES;
    case maru::IndexReader::Found::kAsk:
      return kAskServer;
    case maru::IndexReader::Found::kHit:
      break;
  }
  return 0;
}

// Leases `hit` in `slot` (from FreeSlots) as a handle (from `cache`) in *out: 0, or
// kAskServer when the entry changed meanwhile (the slot is then dropped),
// or -ENOMEM (the slot given back).
int LeaseFromIndex(maru_t *m, maru::IndexReader *ix, const maru::IndexReader::Hit &hit, int slot,
                   ChunkCache *cache, maru_chunk_t **out) {
  const maru::index::EntryData &e = hit.entry;
  auto c = std::unique_ptr<maru_chunk_t>(NewChunk(cache));
  if (!c) {
    ix->GiveBack(&slot, 1);
    return -ENOMEM;
  }
  if (!ix->Take(hit, slot)) return kAskServer;
  maru::ExtentList extents;
  for (uint32_t i = 0; i < e.extent_count; ++i)
    extents.push_back(maru::Extent{static_cast<uint32_t>(e.extents[i].device), e.extents[i].offset,
                                   e.extents[i].length});
  maru::Result<uint8_t *> data = m->pool->Address(extents, &c->view);
  if (!data.ok()) {
    ix->Drop(slot, e.gen);
    return kAskServer;
  }
  c->m = m;
  c->ino = e.ino;
  c->gen = e.gen;
  c->size = e.size;
  c->data = *data;
  maru::direct::ForgetStale(m, c->data, c->size);
  c->recorded_type = static_cast<maru::rpc::ChecksumType>(e.checksum_type);
  c->recorded = e.checksum;
  c->index = ix;
  c->slot = slot;
  *out = c.release();
  return 0;
}

}  // namespace

// In three passes, so that a batch holds each lock once: the entries are
// found first (and slots taken only for those found), then leased, then
// their reads noted (a clock read per ring block, not per key) and their
// leases tracked. Thread-local state (this thread's handle cache, lock
// shards and ring block) is looked up once a batch: each look-up is a call
// into the dynamic linker from a shared library.
int OpenFromIndex(maru_t *m, maru::IndexReader *ix, const char *const *paths, PathForm form,
                  size_t n, maru_chunk_t **out, size_t *opened) {
  *opened = 0;
  // Room for the whole batch first: nothing below allocates (or throws).
  thread_local struct {
    std::vector<maru::IndexReader::Key> keys;
    std::vector<maru::IndexReader::Hit> hits;
    std::vector<int> slots;
    std::vector<MetaClient::SlotLease> leases;
  } room;
  try {
    room.keys.resize(n);
    room.hits.resize(n);
    room.slots.resize(n);
    room.leases.resize(n);
  } catch (const std::bad_alloc &) {
    return -ENOMEM;
  }
  // Plain pointers: GCC looks a thread_local up again after every call, and
  // each look-up is a call into the dynamic linker.
  maru::IndexReader::Key *const keys = room.keys.data();
  maru::IndexReader::Hit *const hits = room.hits.data();
  int *const slots = room.slots.data();
  MetaClient::SlotLease *const leases = room.leases.data();
  size_t keyed = 0;
  while (keyed < n && KeyInIndex(ix, paths[keyed], form, &keys[keyed]) == 0) ++keyed;
  int rc = keyed < n ? kAskServer : 0;
  size_t found = 0;
  for (; found < keyed; ++found) {
    if (const int r = FindInIndex(ix, keys[found], &hits[found]); r != 0) {
      rc = r;
      break;
    }
  }
  const size_t got = found ? ix->FreeSlots(found, slots) : 0;
  if (got < found) rc = kAskServer;  // every slot is in use: the server
  size_t leased = 0;
  ChunkCache *cache = ThisThreadsChunks();
  for (; leased < got; ++leased) {
    const int r = LeaseFromIndex(m, ix, hits[leased], slots[leased], cache, &out[leased]);
    if (r != 0) {
      rc = r;  // its own slot is dropped or given back; the ones after it here
      ix->GiveBack(slots + leased + 1, got - leased - 1);
      break;
    }
  }
  if (leased > 0) {
    ix->NoteReads(hits, leased);
    for (size_t j = 0; j < leased; ++j)
      leases[j] = {out[j]->ino, out[j]->gen, &out[j]->lease_handle, &out[j]->lease_watch};
    if (const size_t tracked = m->client->TrackSlotLeases(leases, leased); tracked < leased) {
      rc = ReleaseAll(out + tracked, leased - tracked, -ENOMEM);  // their slots dropped
      leased = tracked;
    }
  }
  if (n > kKeptBatch) room = {};  // a thread keeps room for a usual batch, not for its largest
  *opened = leased;
  return rc == kAskServer ? 0 : rc;
}

int CountFromIndex(maru::IndexReader *ix, const char *path) {
  maru::IndexReader::Key key;
  maru::IndexReader::Hit hit;
  int rc = KeyInIndex(ix, path, PathForm::kCanonical, &key);
  if (rc == 0) rc = FindInIndex(ix, key, &hit);
  return rc == -EACCES ? -ENOENT : rc;  // not one this caller would count
}

}  // namespace maru::direct
