// Readers: a chunk opened by path (sealed, or still being written in
// parts), the longest prefix of many opened at once, or only counted. The
// shared-memory index answers first where it can, the server the rest.
#include <google/protobuf/arena.h>

#include <algorithm>

#include "argument_checks.h"
#include "chunk_handle.h"
#include "handles.h"
#include "index_lookup.h"

using maru::MetaClient;
namespace rpc = maru::rpc;
using Stub = maru::rpc::Meta::Stub;
using maru::direct::CheckBatch;
using maru::direct::CheckPath;
using maru::direct::CountFromIndex;
using maru::direct::kAskServer;
using maru::direct::MakeChunk;
using maru::direct::OpenFromIndex;
using maru::direct::PathForm;
using maru::direct::ReleaseAll;

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

// Opens the longest prefix of paths[0..n) on the server, in one message:
// handles in out[0..*hits), all of them or, with an error, none.
int LookupOnServer(maru_t *m, const char *const *paths, size_t n, maru_chunk_t **out,
                   size_t *hits) {
  // One arena for the whole call: a lookup of many keys builds many small
  // messages, and the arena frees them at once.
  google::protobuf::Arena arena;
  auto &req = *google::protobuf::Arena::CreateMessage<maru::rpc::LookupPrefixRequest>(&arena);
  auto &rep = *google::protobuf::Arena::CreateMessage<maru::rpc::LookupPrefixReply>(&arena);
  for (size_t i = 0; i < n; ++i) req.add_paths(paths[i]);
  int rc = m->client->LookupPrefix(req, &rep);
  if (rc < 0) return rc;
  size_t i = 0;
  for (; i < static_cast<size_t>(rep.hits_size()); ++i) {
    rc = MakeChunk(m, rep.hits(static_cast<int>(i)), false, &out[i]);
    if (rc < 0) break;
  }
  if (rc < 0) {
    // Give back what this call took: all of it or none.
    maru::rpc::ReleaseRequest rel;
    for (size_t j = i; j < static_cast<size_t>(rep.hits_size()); ++j)
      rel.add_leases(rep.hits(static_cast<int>(j)).lease());
    maru::rpc::ErrorReply ignored;
    m->client->Call(&Stub::Release, rel, &ignored);
    return ReleaseAll(out, i, rc);
  }
  *hits = i;
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
  size_t more = 0;
  rc = LookupOnServer(m, paths + first, n - first, out + first, &more);
  if (rc < 0) return ReleaseAll(out, first, rc);
  *hits = first + more;
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

}  // extern "C"
