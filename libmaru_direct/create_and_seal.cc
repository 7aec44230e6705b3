// Writers: a chunk created at a path (alone or in a batch) and sealed, or
// allocated under no name and published at one.
#include <google/protobuf/arena.h>

#include <unordered_set>
#include <vector>

#include "argument_checks.h"
#include "c_conversions.h"
#include "chunk_handle.h"
#include "handles.h"
#include "util/cache_flush.h"
#include "util/checksum.h"
#include "util/status.h"

namespace rpc = maru::rpc;
using Stub = maru::rpc::Meta::Stub;
using maru::direct::AddTransfers;
using maru::direct::CheckBatch;
using maru::direct::CheckPath;
using maru::direct::HoldLease;
using maru::direct::MakeChunk;

namespace {

// Before a seal or publish: a remote writer's staging buffer goes to the
// reserved extents; the request gets the size and the checksum.
int PrepareSeal(maru_chunk_t *c, maru::rpc::SealRequest *req) {
  if (c->remote && c->size) {
    std::vector<maru::RemotePool::Transfer> transfers;
    AddTransfers(c, 0, c->size, c->staging->data(), &transfers, c->staging->memh());
    maru::Status s = c->m->remote->Put(c->m->client->session(), transfers);
    if (!s.ok()) return maru::ReturnCode(s);
  } else if (c->size && c->m->pool->flush()) {
    // Another host reads memory, not this CPU's caches: the bytes go there
    // before the seal lets anyone open them.
    maru::FlushRange(c->data, c->size);
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

}  // namespace

extern "C" {

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

}  // extern "C"
