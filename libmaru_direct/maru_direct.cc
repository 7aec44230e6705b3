// libmaru_direct: the C API over MetaClient (control) and PoolMap (data).
#include <google/protobuf/arena.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "client/meta_client.h"
#include "client/pool_map.h"
#include "util/address.h"
#include "util/checksum.h"
#include "util/path.h"

#include "maru_direct_internal.h"

using maru::MetaClient;
using Stub = maru::rpc::Meta::Stub;

struct maru_handle {
  std::unique_ptr<MetaClient> client;
  std::unique_ptr<maru::PoolMap> pool;
  std::atomic<uint64_t> next_request{1};
};

struct maru_chunk {
  maru_t *m = nullptr;
  uint64_t ino = 0, gen = 0, size = 0;
  uint8_t *data = nullptr;
  std::unique_ptr<maru::ChunkView> view;
  bool writing = false;
  int checksum = MARU_CHECKSUM_NONE;
  maru::rpc::ChecksumType recorded_type = maru::rpc::CHECKSUM_NONE;
  uint64_t recorded = 0;
  uint64_t lease_handle = 0;
};

namespace {

int64_t EnvInt(const char *name, int64_t fallback) {
  const char *v = getenv(name);
  if (!v || !*v) return fallback;
  char *end = nullptr;
  long long n = strtoll(v, &end, 10);
  return *end ? fallback : n;
}

int CheckPath(const char *path) {
  if (!path) return -EINVAL;
  maru::Result<std::vector<std::string>> parts = maru::SplitPath(path);
  if (!parts.ok()) return -parts.status().errnum();
  return parts->empty() ? -EINVAL : 0;  // "/" is no chunk
}

// Turns a chunk reply into a handle: its address in the pool mapping and
// its lease (or reservation).
int MakeChunk(maru_t *m, const maru::rpc::ChunkReply &rep, bool writing, maru_chunk_t **out) {
  auto c = std::unique_ptr<maru_chunk_t>(new (std::nothrow) maru_chunk_t());
  if (!c) return -ENOMEM;
  c->m = m;
  c->ino = rep.attr().ino();
  c->gen = rep.attr().gen();
  c->size = rep.attr().size();
  c->writing = writing;
  c->recorded_type = rep.attr().checksum_type();
  c->recorded = rep.attr().checksum();
  maru::Result<uint8_t *> data = m->pool->Address(maru::FromWire(rep.extents()), &c->view);
  if (!data.ok()) return -data.status().errnum();
  c->data = *data;
  if (!writing) c->lease_handle = m->client->TrackLease(rep.lease(), c->ino, c->gen);
  *out = c.release();
  return 0;
}

void ReleaseRead(maru_chunk_t *c) {
  if (c->lease_handle) c->m->client->ReleaseLease(c->lease_handle);
  c->lease_handle = 0;
}

}  // namespace

extern "C" {

int maru_connect(const char *target, maru_t **out) {
  if (!out) return -EINVAL;
  *out = nullptr;
  if (!target) target = getenv("MARU_SERVER");
  if (!target || !*target) target = maru::kDefaultServerAddress;
  maru::ClientOptions options;
  options.client_name = "libmaru_direct";
  options.call_timeout_ms = EnvInt("MARU_TIMEOUT_MS", options.call_timeout_ms);
  options.connect_timeout_ms = std::min(options.connect_timeout_ms, options.call_timeout_ms);
  options.retry_window_ms = EnvInt("MARU_RETRY_MS", options.retry_window_ms);
  auto client = MetaClient::Connect(target, options);
  if (!client.ok()) return -client.status().errnum();
  auto pool = maru::PoolMap::Open((*client)->session_info(), EnvInt("MARU_POPULATE", 1) != 0);
  if (!pool.ok()) return -pool.status().errnum();
  auto m = new (std::nothrow) maru_t();
  if (!m) return -ENOMEM;
  m->client = std::move(*client);
  m->pool = std::move(*pool);
  *out = m;
  return 0;
}

void maru_disconnect(maru_t *m) {
  delete m;
}

int maru_create_ex(maru_t *m, const char *path, uint64_t size, const maru_create_opts_t *opts,
                   maru_chunk_t **out) {
  if (!m || !out) return -EINVAL;
  *out = nullptr;
  if (int rc = CheckPath(path); rc < 0) return rc;
  if (size == 0) return -EINVAL;
  if (!m->pool->writable()) return -EROFS;
  if (opts && opts->parent)
    if (int rc = CheckPath(opts->parent); rc < 0) return rc;
  if (opts && (opts->checksum < MARU_CHECKSUM_NONE || opts->checksum > MARU_CHECKSUM_CRC32C))
    return -EINVAL;
  maru::rpc::CreateRequest req;
  req.mutable_ref()->set_path(path);
  req.set_size(size);
  req.set_mode(opts && opts->mode ? opts->mode & 07777 : 0644);
  req.set_parents(true);
  req.set_request_id(m->next_request++);
  if (opts && opts->parent) req.set_parent_chunk(opts->parent);
  maru::rpc::ChunkReply rep;
  int rc = m->client->Call(&Stub::Create, req, &rep);
  if (rc < 0) return rc;
  rc = MakeChunk(m, rep, true, out);
  if (rc < 0) {
    maru::rpc::HandleRequest abort;
    abort.set_ino(rep.attr().ino());
    abort.set_gen(rep.attr().gen());
    maru::rpc::ErrorReply ignored;
    m->client->Call(&Stub::Abort, abort, &ignored);
    return rc;
  }
  (*out)->size = size;
  (*out)->checksum = opts ? opts->checksum : MARU_CHECKSUM_NONE;
  return 0;
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
  if (!c || !c->writing) return -EINVAL;
  maru::rpc::SealRequest req;
  req.set_ino(c->ino);
  req.set_gen(c->gen);
  req.set_size(c->size);
  req.set_keep_lease(true);
  if (c->checksum != MARU_CHECKSUM_NONE) {
    auto kind = static_cast<maru::ChecksumKind>(c->checksum);
    req.set_checksum_type(static_cast<maru::rpc::ChecksumType>(c->checksum));
    req.set_checksum(maru::Checksum(kind, c->data, c->size));
  }
  maru::rpc::ChunkReply rep;
  int rc = c->m->client->Call(&Stub::Seal, req, &rep);
  if (rc < 0) return rc;
  c->writing = false;
  c->recorded_type = req.checksum_type();
  c->recorded = req.checksum();
  c->lease_handle = c->m->client->TrackLease(rep.lease(), c->ino, c->gen);
  return 0;
}

int maru_open(maru_t *m, const char *path, maru_chunk_t **out) {
  if (!m || !out) return -EINVAL;
  *out = nullptr;
  if (int rc = CheckPath(path); rc < 0) return rc;
  maru::rpc::RefRequest req;
  req.mutable_ref()->set_path(path);
  maru::rpc::ChunkReply rep;
  int rc = m->client->Call(&Stub::Open, req, &rep);
  if (rc < 0) return rc;
  rc = MakeChunk(m, rep, false, out);
  if (rc < 0) {
    maru::rpc::ReleaseRequest rel;
    rel.add_leases(rep.lease());
    maru::rpc::ErrorReply ignored;
    m->client->Call(&Stub::Release, rel, &ignored);
  }
  return rc;
}

int maru_lookup_prefix(maru_t *m, const char *const *paths, size_t n, maru_chunk_t **out,
                       size_t *hits) {
  if (!m || (!paths && n) || (!out && n) || !hits) return -EINVAL;
  *hits = 0;
  for (size_t i = 0; i < n; ++i) out[i] = nullptr;
  // One arena for the whole call: a lookup of many keys builds many small
  // messages, and the arena frees them at once.
  google::protobuf::Arena arena;
  auto &req = *google::protobuf::Arena::CreateMessage<maru::rpc::LookupPrefixRequest>(&arena);
  auto &rep = *google::protobuf::Arena::CreateMessage<maru::rpc::LookupPrefixReply>(&arena);
  for (size_t i = 0; i < n; ++i) {
    if (int rc = CheckPath(paths[i]); rc < 0) return rc;
    req.add_paths(paths[i]);
  }
  if (n == 0) return 0;
  int rc = m->client->Call(&Stub::LookupPrefix, req, &rep);
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
    for (size_t j = 0; j < i; ++j) {
      maru_release(out[j]);
      out[j] = nullptr;
    }
    return rc;
  }
  *hits = i;
  return 0;
}

void *maru_chunk_data(maru_chunk_t *c) {
  return c ? c->data : nullptr;
}
uint64_t maru_chunk_size(const maru_chunk_t *c) {
  return c ? c->size : 0;
}

int maru_read_into(maru_chunk_t *c, void *dst, uint64_t off, uint64_t len) {
  if (!c || (!dst && len) || off > c->size || len > c->size - off) return -EINVAL;
  if (len) memcpy(dst, c->data + off, len);
  return 0;
}

int maru_verify(maru_chunk_t *c) {
  if (!c) return -EINVAL;
  if (c->recorded_type == maru::rpc::CHECKSUM_NONE) return 0;
  auto kind = static_cast<maru::ChecksumKind>(c->recorded_type);
  return maru::Checksum(kind, c->data, c->size) == c->recorded ? 0 : -EBADMSG;
}

int maru_release(maru_chunk_t *c) {
  if (!c) return -EINVAL;
  int rc = 0;
  if (c->writing) {
    maru::rpc::HandleRequest req;
    req.set_ino(c->ino);
    req.set_gen(c->gen);
    maru::rpc::ErrorReply rep;
    rc = c->m->client->Call(&Stub::Abort, req, &rep);
    if (rc == -ESTALE) rc = 0;  // already gone with an expired session
  } else {
    ReleaseRead(c);
  }
  delete c;
  return rc;
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
  }
  return strerror(err);
}

}  // extern "C"
