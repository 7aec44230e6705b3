// Layer-wise chunks: a writer publishes a chunk's parts in order; a reader
// of a chunk opened partial waits for the part it needs.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "chunk_handle.h"
#include "handles.h"
#include "util/cache_flush.h"
#include "util/clock.h"
#include "util/status.h"

namespace rpc = maru::rpc;
using maru::direct::AddTransfers;
using maru::direct::ForgetStale;

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
    if (!s.ok()) return maru::ReturnCode(s);
  } else if (c->m->pool->flush()) {
    const uint64_t from = c->published * PartBytes(c), to = (upto + 1) * PartBytes(c);
    maru::FlushRange(c->data + from, to - from);  // in memory before readers wake
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
      const uint32_t before = c->published.load();
      c->published = rep.sealed()
                         ? c->parts
                         : std::min(c->parts, std::max(c->published.load(), rep.published()));
      if (rep.sealed()) c->partial = false;
      // Parts published since the open: lines of them read (or prefetched)
      // before may be stale where the pool is not coherent.
      if (c->published > before)
        ForgetStale(c->m, c->data + before * PartBytes(c), (c->published - before) * PartBytes(c));
      return 0;
    }
    if (rc != -ETIMEDOUT || maru::MonotonicMs() >= deadline) return rc;
  }
}

}  // extern "C"
