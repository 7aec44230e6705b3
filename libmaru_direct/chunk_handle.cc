#include "chunk_handle.h"

#include <algorithm>
#include <memory>

#include "chunk_cache.h"
#include "util/cache_flush.h"
#include "util/checksum.h"
#include "util/status.h"

using maru::MetaClient;

namespace maru::direct {

int AllocateStaging(maru_chunk_t *c, bool writer) {
  auto buffer = c->m->remote->staging().Acquire(c->size, writer);
  if (!buffer.ok()) return maru::ReturnCode(buffer.status());
  c->staging = std::move(*buffer);
  c->data = c->staging->data();
  return 0;
}

void AddTransfers(const maru_chunk_t *c, uint64_t off, uint64_t len, uint8_t *local,
                  std::vector<maru::RemotePool::Transfer> *out, ucp_mem_h memh) {
  c->extents.ForEachPiece(off, len, [&](uint32_t dev, uint64_t at, uint64_t n, uint64_t file_off) {
    out->push_back({dev, at, n, local + (file_off - off), memh});
  });
}

int CheckStillLeased(maru_chunk_t *c) {
  return c->m->client->LeaseValid(c->lease_handle) ? 0 : -ESTALE;
}

void HoldLease(maru_chunk_t *c, uint64_t lease) {
  c->lease_handle = c->m->client->TrackLease(lease, c->ino, c->gen);
  c->lease_watch = c->m->client->WatchLease(c->lease_handle);
}

int Fetch(maru_chunk_t *c) {
  if (c->data || c->size == 0) return 0;
  if (c->partial && c->published < c->parts) return -EBUSY;  // parts not written yet
  if (int rc = AllocateStaging(c, false); rc < 0) return rc;
  std::vector<maru::RemotePool::Transfer> transfers;
  AddTransfers(c, 0, c->size, c->staging->data(), &transfers, c->staging->memh());
  maru::Status s = c->m->remote->Get(c->m->client->session(), transfers);
  int rc = s.ok() ? CheckStillLeased(c) : maru::ReturnCode(s);
  if (rc < 0) {
    c->staging.reset();
    c->data = nullptr;
  }
  return rc;
}

void ForgetStale(maru_t *m, const uint8_t *data, uint64_t size) {
  // This CPU may hold lines of these extents from before (an older chunk
  // there, or a prefetch): without hardware coherence they are not
  // updated by the writer's flush, so they go before the first read.
  if (size && m->pool && m->pool->flush()) maru::InvalidateRange(data, size);
}

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
    if (!data.ok()) return maru::ReturnCode(data.status());
    c->data = *data;
    if (!writing) ForgetStale(m, c->data, c->size);
  }
  if (!writing) HoldLease(c.get(), rep.lease());
  *out = c.release();
  return 0;
}

int ReleaseAll(maru_chunk_t **out, size_t n, int rc) {
  maru_release_batch(out, n, nullptr);
  std::fill_n(out, n, nullptr);
  return rc;
}

namespace {

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

}  // namespace
}  // namespace maru::direct

using maru::direct::Fetch;
using maru::direct::FreeChunk;
using maru::direct::ReadRun;
using maru::direct::ReleaseReads;

extern "C" {

void *maru_chunk_data(maru_chunk_t *c) {
  if (!c) return nullptr;
  if (c->remote && !c->data && Fetch(c) < 0) return nullptr;
  return c->data;
}

uint64_t maru_chunk_size(const maru_chunk_t *c) {
  return c ? c->size : 0;
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

}  // extern "C"
