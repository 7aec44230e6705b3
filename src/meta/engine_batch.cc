// Batched operations: several keys in one call. Create, Seal and Unlink
// run each key under one lock and one commit; Pin runs each through Pin
// itself, saving the round trips. A batch over the keys-per-call limit
// fails whole before any work; a path named twice gets EEXIST the second
// time; every other key gets its own result.
#include "meta/engine_op.h"
#include "meta/meta_engine.h"

namespace maru {

std::vector<bool> RepeatedPaths(const google::protobuf::RepeatedPtrField<std::string> &paths) {
  std::unordered_set<std::string_view> seen;
  std::vector<bool> repeated;
  repeated.reserve(static_cast<size_t>(paths.size()));
  for (const std::string &p : paths) repeated.push_back(!seen.insert(p).second);
  return repeated;
}

void MetaEngine::CreateBatch(const Caller &c, const rpc::CreateBatchRequest &req,
                             rpc::ChunkBatchReply *rep) {
  if (int err = CheckKeys(options_.limits, static_cast<size_t>(req.creates_size())))
    return rep->set_error(err);
  RunOp(c, req, rep, [&](Txn &txn, Session *session) REQUIRES(mu_) -> Status {
    std::unordered_set<std::string_view> seen;
    for (const rpc::CreateRequest &one : req.creates()) {
      rpc::ChunkReply *out = rep->add_chunks();
      const bool repeated = !one.ref().path().empty() && !seen.insert(one.ref().path()).second;
      Status s = repeated ? Status::Error(EEXIST) : CreateOp(c, one, out)(txn, session);
      if (!s.ok()) out->Clear();
      out->set_error(s.errnum());
    }
    return Status::Ok();
  });
}

void MetaEngine::SealBatch(const Caller &c, const rpc::SealBatchRequest &req,
                           rpc::ChunkBatchReply *rep) {
  if (int err = CheckKeys(options_.limits, static_cast<size_t>(req.seals_size())))
    return rep->set_error(err);
  RunOp(c, req, rep, [&](Txn &txn, Session *session) REQUIRES(mu_) -> Status {
    for (const rpc::SealRequest &one : req.seals()) {
      rpc::ChunkReply *out = rep->add_chunks();
      Status s = SealOp(one, out)(txn, session);
      if (!s.ok()) out->Clear();
      out->set_error(s.errnum());
    }
    return Status::Ok();
  });
}

void MetaEngine::CountPrefix(const Caller &c, const rpc::LookupPrefixRequest &req,
                             rpc::CountPrefixReply *rep) {
  if (int err = CheckKeys(options_.limits, static_cast<size_t>(req.paths_size())))
    return rep->set_error(err);
  RunOp(c, req, rep, [&](Txn &, Session *) REQUIRES(mu_) -> Status {
    for (const std::string &path : req.paths()) {
      rpc::Ref ref;
      ref.set_path(path);
      Result<Inode *> found = tree_.Resolve(ref, c);
      // What OpenForRead would refuse, without taking its lease.
      Status s = !found.ok()                        ? found.status()
                 : (*found)->is_dir()               ? Status::Error(EISDIR)
                 : !(*found)->is_file()             ? Status::Error(EINVAL)
                 : !(*found)->current               ? Status::Error(EBUSY)
                 : !MayAccess(**found, c, kMayRead) ? Status::Error(EACCES)
                                                    : Status::Ok();
      if (!s.ok()) {
        rep->set_miss_error(s.errnum());
        break;
      }
      rep->set_count(rep->count() + 1);
    }
    return Status::Ok();
  });
}

// Each path through Pin itself (a lock and a commit each): one round trip
// is what the caller saves, and Pin's rules stay in one place.
void MetaEngine::PinBatch(const Caller &c, const rpc::PinBatchRequest &req, rpc::ErrorsReply *rep) {
  if (int err = CheckKeys(options_.limits, static_cast<size_t>(req.paths_size())))
    return rep->set_error(err);
  const std::vector<bool> repeated = RepeatedPaths(req.paths());
  for (int i = 0; i < req.paths_size(); ++i) {
    if (repeated[static_cast<size_t>(i)]) {
      rep->add_errors(EEXIST);
      continue;
    }
    rpc::PinRequest one;
    *one.mutable_header() = req.header();
    if (i > 0) one.mutable_header()->clear_release();  // released with the first
    one.mutable_ref()->set_path(req.paths(i));
    one.set_pin(req.pin());
    one.set_ttl_ms(req.ttl_ms());
    rpc::AttrReply out;
    Pin(c, one, &out);
    if (out.error() == ENOTCONN) {
      rep->clear_errors();
      return rep->set_error(ENOTCONN);
    }
    rep->add_errors(out.error());
  }
}

void MetaEngine::UnlinkBatch(const Caller &c, const rpc::PathsRequest &req, rpc::ErrorsReply *rep) {
  if (int err = CheckKeys(options_.limits, static_cast<size_t>(req.paths_size())))
    return rep->set_error(err);
  RunOp(c, req, rep, [&](Txn &txn, Session *) REQUIRES(mu_) -> Status {
    const std::vector<bool> repeated = RepeatedPaths(req.paths());
    for (int i = 0; i < req.paths_size(); ++i) {
      rpc::Ref ref;
      ref.set_path(req.paths(i));
      Status s = repeated[static_cast<size_t>(i)] ? Status::Error(EEXIST)
                                                  : RemoveEntry(txn, c, ref, false);
      rep->add_errors(s.errnum());
    }
    return Status::Ok();
  });
}

}  // namespace maru
