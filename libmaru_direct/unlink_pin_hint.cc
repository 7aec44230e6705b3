// Calls on chunks by path that hold nothing: unlink, pin and unpin,
// retention hints; each alone or batched in one round trip.
#include <vector>

#include "argument_checks.h"
#include "handles.h"

namespace rpc = maru::rpc;
using Stub = maru::rpc::Meta::Stub;
using maru::direct::CheckBatch;
using maru::direct::CheckPath;

namespace {

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

}  // extern "C"
