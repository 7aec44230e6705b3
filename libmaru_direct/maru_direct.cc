// libmaru_direct: the C API over MetaClient (control) and, for data, either
// PoolMap (the pool is mapped here: loads and stores in place) or
// RemotePool (it is not: through maru-agent, one-sided get/put on RDMA, checked
// two-sided transfers on TCP).
#include <google/protobuf/arena.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <unordered_set>
#include <vector>

#include "alloc/extent_map.h"
#include "client/index_session.h"
#include "client/meta_client.h"
#include "client/pool_map.h"
#include "fast_lane.h"
#include "rdma/remote_pool.h"
#include "util/address.h"
#include "util/checksum.h"
#include "util/path.h"
#include "util/stream_copy.h"

#include "c_conversions.h"
#include "handles.h"
#include "maru_direct_internal.h"

using maru::MetaClient;
namespace rpc = maru::rpc;
using Stub = maru::rpc::Meta::Stub;

namespace {

constexpr size_t kMaxInstanceName = 64;

int64_t EnvInt(const char *name, int64_t fallback) {
  const char *v = getenv(name);
  if (!v || !*v) return fallback;
  char *end = nullptr;
  long long n = strtoll(v, &end, 10);
  return *end ? fallback : n;
}

int CheckPath(const char *path, bool *canonical = nullptr) {
  if (!path) return -EINVAL;
  size_t names = 0;
  maru::Status s = maru::CheckPathNames(path, &names, canonical);
  if (!s.ok()) return -s.errnum();
  return names == 0 ? -EINVAL : 0;  // "/" is no chunk
}

// A registered buffer from the connection's cache; a writer's reads as
// zeros, as fresh extents do.
int AllocateStaging(maru_chunk_t *c, bool writer) {
  auto buffer = c->m->remote->staging().Acquire(c->size, writer);
  if (!buffer.ok()) return -buffer.status().errnum();
  c->staging = std::move(*buffer);
  c->data = c->staging->data();
  return 0;
}

// The one-sided transfers that move [off, off+len) of a remote chunk to or
// from `local`.
// `memh`: the registration of `local`, if it is a staging buffer.
void AddTransfers(const maru_chunk_t *c, uint64_t off, uint64_t len, uint8_t *local,
                  std::vector<maru::RemotePool::Transfer> *out, ucp_mem_h memh = nullptr) {
  c->extents.ForEachPiece(off, len, [&](uint32_t dev, uint64_t at, uint64_t n, uint64_t file_off) {
    out->push_back({dev, at, n, local + (file_off - off), memh});
  });
}

// Reads land in place: a read is good only if the lease held throughout.
int CheckStillLeased(maru_chunk_t *c) {
  return c->m->client->LeaseValid(c->lease_handle) ? 0 : -ESTALE;
}

// The handle reads under `lease` from now on.
void HoldLease(maru_chunk_t *c, uint64_t lease) {
  c->lease_handle = c->m->client->TrackLease(lease, c->ino, c->gen);
  c->lease_watch = c->m->client->WatchLease(c->lease_handle);
}

// Fetches a remote chunk into a local copy.
int Fetch(maru_chunk_t *c) {
  if (c->data || c->size == 0) return 0;
  if (c->partial && c->published < c->parts) return -EBUSY;  // parts not written yet
  if (int rc = AllocateStaging(c, false); rc < 0) return rc;
  std::vector<maru::RemotePool::Transfer> transfers;
  AddTransfers(c, 0, c->size, c->staging->data(), &transfers, c->staging->memh());
  maru::Status s = c->m->remote->Get(c->m->client->session(), transfers);
  int rc = s.ok() ? CheckStillLeased(c) : -s.errnum();
  if (rc < 0) {
    c->staging.reset();
    c->data = nullptr;
  }
  return rc;
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)  // clang's way to say it
#define MARU_HAS_ASAN 1
#endif
#endif

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
thread_local bool chunk_cache_gone = false;  // trivial: readable after the cache went
ChunkCache::ChunkCache() {
  try {
    blocks.reserve(kKeep);  // once: no allocation after (none kept if this fails)
  } catch (const std::bad_alloc &) {
  }
}
ChunkCache::~ChunkCache() {
  for (void *b : blocks) ::operator delete(b);
  chunk_cache_gone = true;
}
// This thread's cache; null when there is none (off, or gone at thread exit).
ChunkCache *ThisThreadsChunks() {
  if (ChunkCache::kKeep == 0 || chunk_cache_gone) return nullptr;
  thread_local ChunkCache cache;
  return &cache;
}

// A new handle, from `cache` (this thread's, looked up once for a batch) if
// it holds one; null when out of memory.
maru_chunk_t *NewChunk(ChunkCache *cache = ThisThreadsChunks()) {
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
void FreeChunk(maru_chunk_t *c, ChunkCache *cache = ThisThreadsChunks()) {
  c->~maru_chunk();
  if (cache && cache->blocks.size() < cache->blocks.capacity()) {
    cache->blocks.push_back(c);
    return;
  }
  ::operator delete(c);
}

// Turns a chunk reply into a handle: its address in the pool mapping and
// its lease (or reservation).
int MakeChunk(maru_t *m, const maru::rpc::ChunkReply &rep, bool writing, maru_chunk_t **out) {
  auto c = std::unique_ptr<maru_chunk_t>(NewChunk());
  if (!c) return -ENOMEM;
  c->m = m;
  c->ino = rep.attr().ino();
  c->gen = rep.attr().gen();
  c->size = rep.attr().size();
  c->writing = writing;
  c->recorded_type = rep.attr().checksum_type();
  c->recorded = rep.attr().checksum();
  c->parts = std::max<uint32_t>(rep.parts(), 1);
  if (m->remote) {
    c->remote = true;
    c->extents = maru::ExtentMap(maru::FromWire(rep.extents()));
    if (writing) {
      if (int rc = AllocateStaging(c.get(), true); rc < 0) return rc;
    }
  } else {
    maru::Result<uint8_t *> data = m->pool->Address(maru::FromWire(rep.extents()), &c->view);
    if (!data.ok()) return -data.status().errnum();
    c->data = *data;
  }
  if (!writing) HoldLease(c.get(), rep.lease());
  *out = c.release();
  return 0;
}

// Before a seal or publish: a remote writer's staging buffer goes to the
// reserved extents; the request gets the size and the checksum.
int PrepareSeal(maru_chunk_t *c, maru::rpc::SealRequest *req) {
  if (c->remote && c->size) {
    std::vector<maru::RemotePool::Transfer> transfers;
    AddTransfers(c, 0, c->size, c->staging->data(), &transfers, c->staging->memh());
    maru::Status s = c->m->remote->Put(c->m->client->session(), transfers);
    if (!s.ok()) return -s.errnum();
  }
  req->set_ino(c->ino);
  req->set_gen(c->gen);
  req->set_size(c->size);
  req->set_keep_lease(true);
  if (c->checksum != MARU_CHECKSUM_NONE) {
    maru::ChecksumKind kind = maru::ChecksumFromC(c->checksum);
    req->set_checksum_type(maru::ToWire(kind));
    req->set_checksum(maru::Checksum(kind, c->data, c->size));
  }
  return 0;
}

// After a seal or publish went through: the handle reads, with a lease.
void Sealed(maru_chunk_t *c, maru::rpc::ChecksumType type, uint64_t checksum,
            const maru::rpc::ChunkReply &rep) {
  c->writing = false;
  c->ino = rep.attr().ino();
  c->gen = rep.attr().gen();
  c->recorded_type = type;
  c->recorded = checksum;
  c->published = c->parts;
  c->partial = false;
  HoldLease(c, rep.lease());
}

// Options of a create or alloc that make the whole call fail.
int CheckCreateOpts(maru_t *m, const maru_create_opts_t *opts) {
  if (m->pool && !m->pool->writable()) return -EROFS;
  if (opts && (opts->checksum < MARU_CHECKSUM_NONE || opts->checksum > MARU_CHECKSUM_CRC32C))
    return -EINVAL;
  if (opts && (opts->flags & ~MARU_CREATE_CONTIGUOUS)) return -EINVAL;
  return 0;
}

int BuildCreate(maru_t *m, const char *path, uint64_t size, const char *parent,
                const maru_create_opts_t *opts, maru::rpc::CreateRequest *req) {
  if (int rc = CheckPath(path); rc < 0) return rc;
  if (size == 0) return -EINVAL;
  if (opts && opts->parts > 1 && (opts->parts > MARU_PARTS_MAX || size % opts->parts))
    return -EINVAL;
  if (parent)
    if (int rc = CheckPath(parent); rc < 0) return rc;
  req->mutable_ref()->set_path(path);
  req->set_size(size);
  req->set_mode(opts && opts->mode ? opts->mode & 07777 : 0644);
  req->set_parents(true);
  req->set_request_id(m->next_request++);
  if (parent) req->set_parent_chunk(parent);
  req->set_contiguous(opts && (opts->flags & MARU_CREATE_CONTIGUOUS));
  if (opts && opts->parts > 1) req->set_parts(opts->parts);
  return 0;
}

// Gives a reservation back (best effort: the session's end would too).
void Abort(maru_t *m, uint64_t ino, uint64_t gen) {
  maru::rpc::HandleRequest abort;
  abort.set_ino(ino);
  abort.set_gen(gen);
  maru::rpc::ErrorReply ignored;
  m->client->Call(&Stub::Abort, abort, &ignored);
}

// The writable handle for a reservation the server made.
int Writable(maru_t *m, const maru::rpc::ChunkReply &rep, uint64_t size,
             const maru_create_opts_t *opts, maru_chunk_t **out) {
  int rc = MakeChunk(m, rep, true, out);
  if (rc < 0) {
    Abort(m, rep.attr().ino(), rep.attr().gen());
    return rc;
  }
  (*out)->size = size;
  (*out)->checksum = opts ? opts->checksum : MARU_CHECKSUM_NONE;
  return 0;
}

// Releases out[0..n) and returns rc: a lookup takes all of its leases or none.
int ReleaseAll(maru_chunk_t **out, size_t n, int rc) {
  maru_release_batch(out, n, nullptr);
  std::fill_n(out, n, nullptr);
  return rc;
}

// The most read handles maru_release_batch() gives back in one pass.
constexpr size_t kReleaseRun = 64;

// How many of c[0..n), from the start (at most kReleaseRun), are read
// handles of c[0]'s connection and index (or none): those release together.
// 0 when c[0] is NULL or being written (maru_release() tells what of it).
size_t ReadRun(maru_chunk_t *const *c, size_t n) {
  size_t run = 0;
  for (; run < std::min(n, kReleaseRun); ++run) {
    const maru_chunk_t *r = c[run];
    if (!r || r->writing || r->m != c[0]->m || r->index != c[0]->index) break;
  }
  return run;
}

// Releases a run of read handles from ReadRun() and frees them: the slots
// back to the index first (no message), then the leases untracked (a
// granted one queued for release), under one hold of each lock.
void ReleaseReads(maru_chunk_t *const *c, size_t n) {
  int slots[kReleaseRun];
  uint64_t gens[kReleaseRun], handles[kReleaseRun];
  size_t held = 0, tracked = 0;
  for (size_t i = 0; i < n; ++i) {
    if (c[i]->slot >= 0) {
      slots[held] = c[i]->slot;
      gens[held++] = c[i]->gen;
    }
    if (c[i]->lease_handle) handles[tracked++] = c[i]->lease_handle;
  }
  if (held) c[0]->index->Drop(slots, gens, held);
  if (tracked) c[0]->m->client->ReleaseLeases(handles, tracked);
  ChunkCache *cache = ThisThreadsChunks();
  for (size_t i = 0; i < n; ++i) FreeChunk(c[i], cache);
}

// --- The shared-memory index (src/client/index_session.h) ---

// OpenFromIndex's answer when only the server can tell.
constexpr int kAskServer = 1;
// The largest batch whose working room a thread keeps between calls.
constexpr size_t kKeptBatch = 256;

// How OpenFromIndex takes its paths: as given (checked or not: an entry
// found proves its path valid and canonical, since the server enters only
// such paths, under a 128-bit keyed hash of each; a refusal proves nothing
// until the caller has checked the path), or in canonical form (checked
// paths, some not canonical: "//a/b/").
enum class PathForm { kAsGiven, kCanonical };

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
  c->recorded_type = static_cast<maru::rpc::ChecksumType>(e.checksum_type);
  c->recorded = e.checksum;
  c->index = ix;
  c->slot = slot;
  *out = c.release();
  return 0;
}

// Opens paths[0..n) (in `form`) through the index, in order, until one it
// cannot: *opened of them, leased in slots and tracked. Then the return
// tells why it stopped: 0 (all opened, or only the server can tell of the
// next), -ENOENT or -EACCES (the index proves the server would refuse the
// next), or another negative errno (the caller releases what was opened).
//
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

// OpenFromIndex without the lease: 0 for a chunk the server would count.
int CountFromIndex(maru::IndexReader *ix, const char *path) {
  maru::IndexReader::Key key;
  maru::IndexReader::Hit hit;
  int rc = KeyInIndex(ix, path, PathForm::kCanonical, &key);
  if (rc == 0) rc = FindInIndex(ix, key, &hit);
  return rc == -EACCES ? -ENOENT : rc;  // not one this caller would count
}

// The option if given, else $MARU_POPULATE, else the bounded default.
maru::Populate PopulateMode(const maru_connect_opts_t *opts) {
  const int mode = opts ? opts->populate : MARU_POPULATE_AUTO;
  if (mode == MARU_POPULATE_NEVER) return maru::Populate::kNever;
  if (mode == MARU_POPULATE_ALWAYS) return maru::Populate::kAlways;
  const int64_t env = EnvInt("MARU_POPULATE", -1);
  if (env < 0) return maru::Populate::kAuto;
  return env ? maru::Populate::kAlways : maru::Populate::kNever;
}

}  // namespace

extern "C" {

int maru_connect(const char *target, maru_t **out) {
  return maru_connect_ex(target, nullptr, out);
}

int maru_connect_ex(const char *target, const maru_connect_opts_t *opts, maru_t **out) {
  if (!out) return -EINVAL;
  *out = nullptr;
  if (opts && opts->instance && strlen(opts->instance) > kMaxInstanceName) return -ENAMETOOLONG;
  if (opts && (opts->populate < MARU_POPULATE_AUTO || opts->populate > MARU_POPULATE_ALWAYS))
    return -EINVAL;
  if (!target) target = getenv("MARU_SERVER");
  if (!target || !*target) target = maru::kDefaultServerAddress;
  maru::ClientOptions options;
  options.client_name = "libmaru_direct";
  if (opts && opts->instance) options.instance = opts->instance;
  options.call_timeout_ms = EnvInt("MARU_TIMEOUT_MS", options.call_timeout_ms);
  options.connect_timeout_ms = std::min(options.connect_timeout_ms, options.call_timeout_ms);
  options.retry_window_ms = EnvInt("MARU_RETRY_MS", options.retry_window_ms);
  auto client = MetaClient::Connect(target, options);
  if (!client.ok()) return -client.status().errnum();
  auto m = std::unique_ptr<maru_t>(new (std::nothrow) maru_t());
  if (!m) return -ENOMEM;
  const rpc::OpenSessionReply info = (*client)->session_info();
  m->client = std::move(*client);
  // Map the pool if this host sees it; else go through the agents.
  const char *data_path = getenv("MARU_DATA");
  const bool force_remote = data_path && strcmp(data_path, "remote") == 0;
  maru::Result<std::unique_ptr<maru::PoolMap>> pool = maru::Status::Error(ENODEV, "remote");
  if (!force_remote) pool = maru::PoolMap::Open(info, PopulateMode(opts));
  if (pool.ok()) {
    m->pool = std::move(*pool);
  } else {
    const int err = pool.status().errnum();
    if (!force_remote && err != ENOENT && err != ENODEV && err != EACCES) return -err;
    std::map<uint32_t, std::string> agents;
    for (const rpc::Device &d : info.devices())
      if (!d.agent().empty()) agents[d.index()] = d.agent();
    if (agents.size() != static_cast<size_t>(info.devices_size()))
      return force_remote ? -ENODEV : -err;
    MetaClient *meta = m->client.get();
    auto refresh = [meta] {
      maru::RemotePool::AgentMap now;
      rpc::StatfsRequest req;
      rpc::StatfsReply rep;
      if (meta->Call(&Stub::Statfs, req, &rep) == 0)
        for (const rpc::Device &d : rep.devices()) now[d.index()] = d.agent();
      return now;
    };
    // The server vouches to the agent for what this session holds.
    auto issue = [meta](uint32_t device, const std::vector<maru::RemotePool::Range> &ranges,
                        bool writable) -> maru::Result<std::string> {
      rpc::IssueGrantRequest req;
      req.set_device(device);
      req.set_writable(writable);
      for (const maru::RemotePool::Range &r : ranges) {
        rpc::Extent *e = req.add_extents();
        e->set_device(device);
        e->set_offset(r.offset);
        e->set_length(r.length);
      }
      rpc::GrantReply rep;
      if (int rc = meta->Call(&Stub::IssueGrant, req, &rep))
        return maru::Status::Error(-rc, "no grant for the extents");
      return rep.grant().SerializeAsString();
    };
    auto remote = maru::RemotePool::Create(agents, options.call_timeout_ms, refresh, issue);
    if (!remote.ok()) return -remote.status().errnum();
    m->remote = std::move(*remote);
  }
  m->stream_writes = EnvInt("MARU_STREAM_WRITES", 1) != 0;
  // The index is read where the pool is mapped, from a local server.
  const char *use_index = getenv("MARU_INDEX");
  const bool index_ok = m->pool && m->client->address().rfind("unix://", 0) == 0 &&
                        !(use_index && strcmp(use_index, "0") == 0);
  m->index = std::make_unique<maru::IndexSession>(m->client.get(), index_ok);
  *out = m.release();
  return 0;
}

void maru_disconnect(maru_t *m) {
  delete m;
}

int maru_create_ex(maru_t *m, const char *path, uint64_t size, const maru_create_opts_t *opts,
                   maru_chunk_t **out) {
  if (out) *out = nullptr;  // on every error, as the header says
  if (!m || !out) return -EINVAL;
  if (int rc = CheckCreateOpts(m, opts); rc < 0) return rc;
  maru::rpc::CreateRequest req;
  if (int rc = BuildCreate(m, path, size, opts ? opts->parent : nullptr, opts, &req); rc < 0)
    return rc;
  maru::rpc::ChunkReply rep;
  int rc = m->client->Create(req, &rep);
  if (rc < 0) return rc;
  return Writable(m, rep, size, opts, out);
}

int maru_create(maru_t *m, const char *path, uint64_t size, maru_chunk_t **out) {
  return maru_create_ex(m, path, size, nullptr, out);
}

int maru_create_child(maru_t *m, const char *path, const char *parent, uint64_t size,
                      maru_chunk_t **out) {
  maru_create_opts_t opts{};
  opts.parent = parent;
  return maru_create_ex(m, path, size, &opts, out);
}

int maru_seal(maru_chunk_t *c) {
  if (!c || !c->writing || c->allocated) return -EINVAL;
  maru::rpc::SealRequest req;
  if (int rc = PrepareSeal(c, &req); rc < 0) return rc;
  maru::rpc::ChunkReply rep;
  int rc = c->m->client->Seal(req, &rep);
  if (rc < 0) return rc;
  Sealed(c, req.checksum_type(), req.checksum(), rep);
  return 0;
}

}  // extern "C"

namespace {

// maru_open() and maru_open_partial(): `call` is the server's operation.
int OpenChunk(maru_t *m, const char *path, maru_chunk_t **out,
              int (MetaClient::*call)(rpc::RefRequest &, rpc::ChunkReply *)) {
  if (out) *out = nullptr;
  if (!m || !out) return -EINVAL;
  bool as_is = false;
  if (int rc = CheckPath(path, &as_is); rc < 0) return rc;
  const PathForm form = as_is ? PathForm::kAsGiven : PathForm::kCanonical;
  if (maru::IndexReader *ix = m->index->Current()) {
    // A refusal from the index is asked again: the server tells which errno.
    size_t opened = 0;
    int rc = OpenFromIndex(m, ix, &path, form, 1, out, &opened);
    if (opened == 1 || (rc < 0 && rc != -ENOENT && rc != -EACCES)) return rc;
  }
  maru::rpc::RefRequest req;
  req.mutable_ref()->set_path(path);
  maru::rpc::ChunkReply rep;
  int rc = (m->client.get()->*call)(req, &rep);
  if (rc < 0) return rc;
  rc = MakeChunk(m, rep, false, out);
  if (rc < 0) {
    maru::rpc::ReleaseRequest rel;
    rel.add_leases(rep.lease());
    maru::rpc::ErrorReply ignored;
    m->client->Call(&Stub::Release, rel, &ignored);
    return rc;
  }
  (*out)->published = rep.writing() ? std::min(rep.published(), (*out)->parts) : (*out)->parts;
  (*out)->partial = rep.writing();
  return 0;
}

}  // namespace

extern "C" {

int maru_open(maru_t *m, const char *path, maru_chunk_t **out) {
  return OpenChunk(m, path, out, &MetaClient::Open);
}

int maru_open_partial(maru_t *m, const char *path, maru_chunk_t **out) {
  return OpenChunk(m, path, out, &MetaClient::OpenPartial);
}

int maru_lookup_prefix(maru_t *m, const char *const *paths, size_t n, maru_chunk_t **out,
                       size_t *hits) {
  if (hits) *hits = 0;
  for (size_t i = 0; out && i < n; ++i) out[i] = nullptr;
  if (!m || (!paths && n) || (!out && n) || !hits) return -EINVAL;
  if (n == 0) return 0;
  // The index first, and from the first path it cannot answer, the server
  // (the rest of the paths, in one message). The index takes a batch the
  // server would.
  maru::IndexReader *ix = n <= MARU_BATCH_MAX ? m->index->Current() : nullptr;
  size_t first = 0;
  int rc = 0;
  if (ix) {
    // The paths as given: the ones found need no check (a fifth of a
    // lookup's time went to checking paths the index then found).
    rc = OpenFromIndex(m, ix, paths, PathForm::kAsGiven, n, out, &first);
    if (rc < 0 && rc != -ENOENT && rc != -EACCES) return ReleaseAll(out, first, rc);
  }
  // The rest are checked as the server checks them: a bad one fails the
  // call, even past a miss.
  bool as_is = true;
  for (size_t i = first; i < n; ++i)
    if (int bad = CheckPath(paths[i], i == first ? &as_is : nullptr); bad < 0)
      return ReleaseAll(out, first, bad);
  if (ix && first < n && !as_is) {
    // Not found as given: it, and the ones after it, may be in canonical form.
    size_t more = 0;
    rc = OpenFromIndex(m, ix, paths + first, PathForm::kCanonical, n - first, out + first, &more);
    first += more;
  }
  if (rc < 0 && rc != -ENOENT && rc != -EACCES) return ReleaseAll(out, first, rc);
  if (rc == -ENOENT || rc == -EACCES) {  // the index proves the server would stop here too
    *hits = first;
    return 0;
  }
  if (first == n) {
    *hits = n;
    return 0;
  }
  // One arena for the whole call: a lookup of many keys builds many small
  // messages, and the arena frees them at once.
  google::protobuf::Arena arena;
  auto &req = *google::protobuf::Arena::CreateMessage<maru::rpc::LookupPrefixRequest>(&arena);
  auto &rep = *google::protobuf::Arena::CreateMessage<maru::rpc::LookupPrefixReply>(&arena);
  for (size_t i = first; i < n; ++i) req.add_paths(paths[i]);
  rc = m->client->LookupPrefix(req, &rep);
  if (rc < 0) return ReleaseAll(out, first, rc);
  size_t i = 0;
  for (; i < static_cast<size_t>(rep.hits_size()); ++i) {
    rc = MakeChunk(m, rep.hits(static_cast<int>(i)), false, &out[first + i]);
    if (rc < 0) break;
  }
  if (rc < 0) {
    // Give back what this call took: all of it or none.
    maru::rpc::ReleaseRequest rel;
    for (size_t j = i; j < static_cast<size_t>(rep.hits_size()); ++j)
      rel.add_leases(rep.hits(static_cast<int>(j)).lease());
    maru::rpc::ErrorReply ignored;
    m->client->Call(&Stub::Release, rel, &ignored);
    return ReleaseAll(out, first + i, rc);
  }
  *hits = first + i;
  return 0;
}

void *maru_chunk_data(maru_chunk_t *c) {
  if (!c) return nullptr;
  if (c->remote && !c->data && Fetch(c) < 0) return nullptr;
  return c->data;
}
uint64_t maru_chunk_size(const maru_chunk_t *c) {
  return c ? c->size : 0;
}

}  // extern "C"

namespace maru {

int CheckReadOp(const maru_read_op_t &op) {
  const maru_chunk_t *c = op.chunk;
  if (!c || (!op.dst && op.len) || op.off > c->size || op.len > c->size - op.off) return -EINVAL;
  // A chunk still being written: only the parts seen published.
  if (c->partial && op.off + op.len > c->published * (c->size / c->parts)) return -EBUSY;
  return 0;
}

int CheckWriteOp(const maru_write_op_t &op) {
  const maru_chunk_t *c = op.chunk;
  if (!c || !c->writing || !c->data || (!op.src && op.len) || op.off > c->size ||
      op.len > c->size - op.off)
    return -EINVAL;
  return 0;
}

}  // namespace maru

extern "C" {

int maru_write_from_batch(const maru_write_op_t *ops, size_t n) {
  if (!ops && n) return -EINVAL;
  for (size_t i = 0; i < n; ++i)
    if (int rc = maru::CheckWriteOp(ops[i]); rc < 0) return rc;
  // A writer's bytes are local: the pool mapping, streamed past the caches
  // (a fresh extent is not cached: a plain copy would read it in first),
  // or a remote chunk's staging buffer, reused and likely cached: copied.
  for (size_t i = 0; i < n; ++i) {
    const maru_write_op_t &op = ops[i];
    if (!op.len) continue;
    uint8_t *dst = op.chunk->data + op.off;
    if (!op.chunk->remote && op.chunk->m->stream_writes)
      maru::StreamCopy(dst, op.src, op.len);
    else
      memcpy(dst, op.src, op.len);
  }
  return 0;
}

int maru_write_from(maru_chunk_t *c, const void *src, uint64_t off, uint64_t len) {
  maru_write_op_t op{c, src, off, len};
  return maru_write_from_batch(&op, 1);
}

int maru_read_into(maru_chunk_t *c, void *dst, uint64_t off, uint64_t len) {
  maru_read_op_t op{c, dst, off, len};
  return maru_read_into_batch(&op, 1);
}

int maru_read_into_batch(const maru_read_op_t *ops, size_t n) {
  if (!ops && n) return -EINVAL;
  std::vector<maru::RemotePool::Transfer> transfers;
  maru_t *m = nullptr;
  for (size_t i = 0; i < n; ++i)
    if (int rc = maru::CheckReadOp(ops[i]); rc < 0) return rc;
  for (size_t i = 0; i < n; ++i) {
    const maru_read_op_t &op = ops[i];
    maru_chunk_t *c = op.chunk;
    if (c->data) {
      if (op.len) memcpy(op.dst, c->data + op.off, op.len);
      continue;
    }
    if (m && m != c->m) return -EINVAL;  // one connection per batch
    m = c->m;
    AddTransfers(c, op.off, op.len, static_cast<uint8_t *>(op.dst), &transfers);
  }
  if (transfers.empty()) return 0;
  // Straight into the callers' buffers, all in flight at once.
  maru::Status s = m->remote->Get(m->client->session(), transfers);
  if (!s.ok()) return -s.errnum();
  for (size_t i = 0; i < n; ++i)
    if (!ops[i].chunk->data)
      if (int rc = CheckStillLeased(ops[i].chunk); rc < 0) return rc;
  return 0;
}

int maru_verify(maru_chunk_t *c) {
  if (!c) return -EINVAL;
  if (c->recorded_type == maru::rpc::CHECKSUM_NONE) return 0;
  if (c->remote && !c->data)
    if (int rc = Fetch(c); rc < 0) return rc;
  maru::ChecksumKind kind = maru::FromWire(c->recorded_type);
  return maru::Checksum(kind, c->data, c->size) == c->recorded ? 0 : -EBADMSG;
}

int maru_lease_check(maru_chunk_t *c) {
  if (!c || c->writing || !c->lease_handle) return -EINVAL;
  if (!c->m->client->LeaseHeld(c->lease_watch)) return -ESTALE;
  // A slot lease holds while its index is the server's and its region this
  // session's; once a resume renewed it as a granted lease, that one counts.
  if (c->slot >= 0 && MetaClient::IsSlotLease(c->lease_watch.lease->load()) && !c->index->Live())
    return -ESTALE;
  return 0;
}

int maru_release(maru_chunk_t *c) {
  if (!c) return -EINVAL;
  if (!c->writing) {
    ReleaseReads(&c, 1);
    return 0;
  }
  maru::rpc::HandleRequest req;
  req.set_ino(c->ino);
  req.set_gen(c->gen);
  maru::rpc::ErrorReply rep;
  int rc = c->m->client->Abort(req, &rep);
  if (rc == -ESTALE) rc = 0;  // already gone with an expired session
  FreeChunk(c);
  return rc;
}

int maru_release_batch(maru_chunk_t *const *chunks, size_t n, int *results) {
  if (n && !chunks) return -EINVAL;
  int first = 0;
  for (size_t i = 0; i < n;) {
    if (const size_t run = ReadRun(chunks + i, n - i); run > 0) {
      ReleaseReads(chunks + i, run);
      if (results) std::fill_n(results + i, run, 0);
      i += run;
      continue;
    }
    const int rc = maru_release(chunks[i]);
    if (results) results[i] = rc;
    if (rc < 0 && first == 0) first = rc;
    ++i;
  }
  return first;
}

int maru_unlink(maru_t *m, const char *path) {
  if (!m) return -EINVAL;
  if (int rc = CheckPath(path); rc < 0) return rc;
  maru::rpc::RefRequest req;
  req.mutable_ref()->set_path(path);
  maru::rpc::ErrorReply rep;
  return m->client->Call(&Stub::Unlink, req, &rep);
}

static int Pin(maru_t *m, const char *path, bool pin, uint64_t ttl_ms) {
  if (!m) return -EINVAL;
  if (int rc = CheckPath(path); rc < 0) return rc;
  maru::rpc::PinRequest req;
  req.mutable_ref()->set_path(path);
  req.set_pin(pin);
  req.set_ttl_ms(ttl_ms);
  maru::rpc::AttrReply rep;
  return m->client->Call(&Stub::Pin, req, &rep);
}

int maru_pin(maru_t *m, const char *path) {
  return Pin(m, path, true, 0);
}
int maru_pin_ttl(maru_t *m, const char *path, uint64_t ttl_ms) {
  return Pin(m, path, true, ttl_ms);
}
int maru_unpin(maru_t *m, const char *path) {
  return Pin(m, path, false, 0);
}

int maru_pool_info(maru_t *m, maru_pool_info_t *out) {
  if (!m || !out) return -EINVAL;
  maru::rpc::StatfsRequest req;
  maru::rpc::StatfsReply rep;
  int rc = m->client->Call(&Stub::Statfs, req, &rep);
  if (rc < 0) return rc;
  out->total = rep.total();
  out->free = rep.free();
  out->unit = rep.unit();
  out->files = rep.files();
  return 0;
}

const char *maru_strerror(int err) {
  if (err < 0) err = -err;
  switch (err) {
    case 0:
      return "success";
    case EBUSY:
      return "chunk is being written and not sealed yet";
    case ESTALE:
      return "lease or reservation lost (session expired or server restarted)";
    case ENOTCONN:
      return "metadata server unreachable";
    case ECONNREFUSED:
      return "no metadata server at that address";
    case ENODEV:
      return "pool device not visible on this host";
    case EBADMSG:
      return "chunk bytes do not match their checksum";
    case ECONNRESET:
      return "connection to the pool's agent lost";
  }
  return strerror(err);
}

}  // extern "C"

// --- Batched, lease-free and allocate-then-publish calls (issue #13) ---------

namespace {

// The checks every batched call makes before it does anything.
int CheckBatch(const void *items, size_t n) {
  if (!items && n) return -EINVAL;
  return n > MARU_BATCH_MAX ? -E2BIG : 0;
}

// One round trip for per-path operations: paths that fail the client's
// checks get their error here and are not sent.
template <typename Req>
int PathBatch(maru_t *m, const char *const *paths, size_t n, int *results, Req &req,
              int (*call)(maru_t *, Req &, maru::rpc::ErrorsReply *)) {
  if (!m || (!results && n)) return -EINVAL;
  if (int rc = CheckBatch(paths, n); rc < 0) return rc;
  std::vector<size_t> sent;
  for (size_t i = 0; i < n; ++i) {
    results[i] = CheckPath(paths[i]);
    if (results[i] == 0) {
      req.add_paths(paths[i]);
      sent.push_back(i);
    }
  }
  if (sent.empty()) return 0;
  maru::rpc::ErrorsReply rep;
  if (int rc = call(m, req, &rep); rc < 0) return rc;
  if (rep.errors_size() != static_cast<int>(sent.size())) return -EPROTO;
  for (size_t j = 0; j < sent.size(); ++j) results[sent[j]] = -rep.errors(static_cast<int>(j));
  return 0;
}

int CallPinBatch(maru_t *m, maru::rpc::PinBatchRequest &req, maru::rpc::ErrorsReply *rep) {
  return m->client->Call(&Stub::PinBatch, req, rep);
}

int CallUnlinkBatch(maru_t *m, maru::rpc::PathsRequest &req, maru::rpc::ErrorsReply *rep) {
  return m->client->Call(&Stub::UnlinkBatch, req, rep);
}

int CallHint(maru_t *m, maru::rpc::HintRequest &req, maru::rpc::ErrorsReply *rep) {
  return m->client->Hint(req, rep);  // the fast lane when there is one
}

}  // namespace

extern "C" {

int maru_create_batch(maru_t *m, maru_create_req_t *reqs, size_t n,
                      const maru_create_opts_t *opts) {
  if (!m) return -EINVAL;
  if (int rc = CheckBatch(reqs, n); rc < 0) return rc;
  for (size_t i = 0; i < n; ++i) reqs[i].chunk = nullptr, reqs[i].result = 0;
  if (n == 0) return 0;
  if (int rc = CheckCreateOpts(m, opts); rc < 0) return rc;
  google::protobuf::Arena arena;
  auto &req = *google::protobuf::Arena::CreateMessage<rpc::CreateBatchRequest>(&arena);
  auto &rep = *google::protobuf::Arena::CreateMessage<rpc::ChunkBatchReply>(&arena);
  std::vector<size_t> sent;
  for (size_t i = 0; i < n; ++i) {
    maru_create_req_t &r = reqs[i];
    r.result = BuildCreate(m, r.path, r.size, r.parent, opts, req.add_creates());
    if (r.result < 0)
      req.mutable_creates()->RemoveLast();
    else
      sent.push_back(i);
  }
  if (sent.empty()) return 0;
  int rc = m->client->CreateBatch(req, &rep);
  if (rc < 0) return rc;
  if (rep.chunks_size() != static_cast<int>(sent.size())) return -EPROTO;
  for (size_t j = 0; j < sent.size(); ++j) {
    const rpc::ChunkReply &one = rep.chunks(static_cast<int>(j));
    maru_create_req_t &r = reqs[sent[j]];
    r.result = one.error() ? -one.error() : Writable(m, one, r.size, opts, &r.chunk);
  }
  return 0;
}

int maru_seal_batch(maru_chunk_t *const *chunks, size_t n, int *results) {
  if (int rc = CheckBatch(chunks, n); rc < 0) return rc;
  if (!results && n) return -EINVAL;
  for (size_t i = 0; i < n; ++i)
    if (!chunks[i] || chunks[i]->m != chunks[0]->m) return -EINVAL;  // one maru_t per batch
  if (n == 0) return 0;
  maru_t *m = chunks[0]->m;
  google::protobuf::Arena arena;
  auto &req = *google::protobuf::Arena::CreateMessage<rpc::SealBatchRequest>(&arena);
  auto &rep = *google::protobuf::Arena::CreateMessage<rpc::ChunkBatchReply>(&arena);
  std::vector<size_t> sent;
  std::unordered_set<const maru_chunk_t *> seen;
  for (size_t i = 0; i < n; ++i) {
    maru_chunk_t *c = chunks[i];
    results[i] = !seen.insert(c).second        ? -EEXIST
                 : !c->writing || c->allocated ? -EINVAL
                                               : PrepareSeal(c, req.add_seals());
    if (results[i] == 0)
      sent.push_back(i);
    else if (req.seals_size() > static_cast<int>(sent.size()))
      req.mutable_seals()->RemoveLast();
  }
  if (sent.empty()) return 0;
  int rc = m->client->SealBatch(req, &rep);
  if (rc < 0) return rc;
  if (rep.chunks_size() != static_cast<int>(sent.size())) return -EPROTO;
  for (size_t j = 0; j < sent.size(); ++j) {
    const int k = static_cast<int>(j);
    results[sent[j]] = -rep.chunks(k).error();
    if (rep.chunks(k).error() == 0)
      Sealed(chunks[sent[j]], req.seals(k).checksum_type(), req.seals(k).checksum(), rep.chunks(k));
  }
  return 0;
}

int maru_alloc(maru_t *m, uint64_t size, const maru_create_opts_t *opts, maru_chunk_t **out) {
  if (out) *out = nullptr;
  if (!m || !out || size == 0) return -EINVAL;
  if (int rc = CheckCreateOpts(m, opts); rc < 0) return rc;
  rpc::AllocRequest req;
  req.set_size(size);
  req.set_contiguous(opts && (opts->flags & MARU_CREATE_CONTIGUOUS));
  rpc::ChunkReply rep;
  int rc = m->client->Alloc(req, &rep);
  if (rc < 0) return rc;
  if (int err = Writable(m, rep, size, opts, out); err < 0) return err;
  (*out)->allocated = true;
  (*out)->mode = opts && opts->mode ? opts->mode & 07777 : 0644;
  return 0;
}

int maru_publish(maru_chunk_t *c, const char *path, const char *parent) {
  if (!c || !c->allocated || !c->writing) return -EINVAL;
  if (int rc = CheckPath(path); rc < 0) return rc;
  if (parent)
    if (int rc = CheckPath(parent); rc < 0) return rc;
  rpc::SealRequest seal;
  if (int rc = PrepareSeal(c, &seal); rc < 0) return rc;
  rpc::PublishRequest req;
  req.set_gen(c->gen);
  req.set_path(path);
  if (parent) req.set_parent_chunk(parent);
  req.set_mode(c->mode);
  req.set_size(c->size);
  req.set_checksum_type(seal.checksum_type());
  req.set_checksum(seal.checksum());
  rpc::ChunkReply rep;
  int rc = c->m->client->Publish(req, &rep);
  if (rc == -ESTALE) {
    // The server lost the allocation (its session ended): nothing is held.
    c->writing = false;
    c->data = nullptr;
    c->view.reset();
    c->staging.reset();
  }
  if (rc < 0) return rc;
  Sealed(c, seal.checksum_type(), seal.checksum(), rep);
  return 0;
}

int maru_count_prefix(maru_t *m, const char *const *paths, size_t n, size_t *count) {
  if (count) *count = 0;
  if (!m || !count) return -EINVAL;
  if (int rc = CheckBatch(paths, n); rc < 0) return rc;
  for (size_t i = 0; i < n; ++i)
    if (int rc = CheckPath(paths[i]); rc < 0) return rc;
  if (n == 0) return 0;
  size_t first = 0;
  if (maru::IndexReader *ix = m->index->Current()) {
    for (; first < n; ++first) {
      int rc = CountFromIndex(ix, paths[first]);
      if (rc == kAskServer) break;
      if (rc < 0) {
        *count = first;
        return 0;
      }
    }
    if (first == n) {
      *count = n;
      return 0;
    }
  }
  google::protobuf::Arena arena;
  auto &req = *google::protobuf::Arena::CreateMessage<rpc::LookupPrefixRequest>(&arena);
  for (size_t i = first; i < n; ++i) req.add_paths(paths[i]);
  rpc::CountPrefixReply rep;
  int rc = m->client->CountPrefix(req, &rep);
  if (rc < 0) return rc;
  *count = first + std::min<size_t>(rep.count(), n - first);
  return 0;
}

int maru_pin_batch(maru_t *m, const char *const *paths, size_t n, uint64_t ttl_ms, int *results) {
  rpc::PinBatchRequest req;
  req.set_pin(true);
  req.set_ttl_ms(ttl_ms);
  return PathBatch(m, paths, n, results, req, CallPinBatch);
}

int maru_unpin_batch(maru_t *m, const char *const *paths, size_t n, int *results) {
  rpc::PinBatchRequest req;
  req.set_pin(false);
  return PathBatch(m, paths, n, results, req, CallPinBatch);
}

int maru_unlink_batch(maru_t *m, const char *const *paths, size_t n, int *results) {
  rpc::PathsRequest req;
  return PathBatch(m, paths, n, results, req, CallUnlinkBatch);
}

int maru_hint_batch(maru_t *m, const char *const *paths, size_t n, int hint, int *results) {
  if (hint < MARU_HINT_NONE || hint > MARU_HINT_DROP) return -EINVAL;
  rpc::HintRequest req;
  req.set_hint(static_cast<uint32_t>(hint));
  return PathBatch(m, paths, n, results, req, CallHint);
}

int maru_hint(maru_t *m, const char *path, int hint) {
  int result = 0;
  if (int rc = maru_hint_batch(m, &path, 1, hint, &result); rc < 0) return rc;
  return result;
}

int maru_pool_regions(maru_t *m, maru_region_t *out, size_t max, size_t *count) {
  if (count) *count = 0;
  if (!m || !count || (!out && max)) return -EINVAL;
  if (!m->pool) return 0;  // reached through agents: nothing mapped here
  size_t found = 0;
  for (uint32_t i = 0; i < m->pool->device_slots(); ++i) {
    const maru::PoolDevice *d = m->pool->device(i);
    if (!d) continue;
    if (found < max) out[found] = maru_region_t{d->base(), d->mapped_bytes(), i};
    ++found;
  }
  *count = found;
  return 0;
}

}  // extern "C"

// --- Layer-wise chunks (issue #14) -------------------------------------------

namespace {

// The server holds one wait at most this long; the client calls again.
constexpr int kWaitSliceMs = 1000;

uint64_t PartBytes(const maru_chunk_t *c) {
  return c->size / c->parts;
}

}  // namespace

extern "C" {

uint32_t maru_chunk_parts(const maru_chunk_t *c) {
  return c ? c->parts : 0;
}

int maru_publish_part(maru_chunk_t *c, uint32_t upto) {
  if (!c || !c->writing || c->allocated || upto >= c->parts) return -EINVAL;
  if (upto < c->published) return 0;
  if (c->remote) {
    // The parts go from the staging buffer to the pool before readers wake.
    const uint64_t from = c->published * PartBytes(c), to = (upto + 1) * PartBytes(c);
    std::vector<maru::RemotePool::Transfer> transfers;
    AddTransfers(c, from, to - from, c->staging->data() + from, &transfers, c->staging->memh());
    maru::Status s = c->m->remote->Put(c->m->client->session(), transfers);
    if (!s.ok()) return -s.errnum();
  }
  rpc::PartRequest req;
  req.set_ino(c->ino);
  req.set_gen(c->gen);
  req.set_parts(c->parts);
  req.set_upto(upto);
  rpc::PartReply rep;
  int rc = c->m->client->PublishPart(req, &rep);
  if (rc < 0) return rc;
  c->published = upto + 1;
  return 0;
}

int maru_wait_part(maru_chunk_t *c, uint32_t part, int timeout_ms) {
  if (!c || c->writing || !c->lease_handle || part >= c->parts) return -EINVAL;
  if (part < c->published) return 0;
  const int64_t deadline = timeout_ms < 0 ? INT64_MAX : maru::MonotonicMs() + timeout_ms;
  rpc::PartRequest req;
  req.set_ino(c->ino);
  req.set_gen(c->gen);
  req.set_upto(part);
  for (;;) {
    // The lease's id may change when a resumed session renews it.
    req.set_lease(c->lease_watch.lease ? c->lease_watch.lease->load() : 0);
    const int64_t left = deadline - maru::MonotonicMs();
    req.set_timeout_ms(static_cast<uint32_t>(std::clamp<int64_t>(left, 0, kWaitSliceMs)));
    rpc::PartReply rep;
    int rc = c->m->client->WaitPart(req, &rep);
    if (rc == 0) {
      c->published = rep.sealed()
                         ? c->parts
                         : std::min(c->parts, std::max(c->published.load(), rep.published()));
      if (rep.sealed()) c->partial = false;
      return 0;
    }
    if (rc != -ETIMEDOUT || maru::MonotonicMs() >= deadline) return rc;
  }
}

}  // extern "C"
