#include "ha/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "etcd.grpc.pb.h"
#include "util/clock.h"

namespace maru {
namespace {

namespace pb = etcdserverpb;

// A connection that broke is tried again soon: a restarted etcd member is
// used again within a call's deadline, not after gRPC's default backoff.
std::shared_ptr<grpc::Channel> NewChannel(const std::string &endpoint) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(endpoint, grpc::InsecureChannelCredentials(), args);
}

// Failures that another endpoint may not have: this one is down, cut off,
// or has no quorum leader.
bool TryNext(const grpc::Status &s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
         s.error_code() == grpc::StatusCode::UNKNOWN;
}

int ErrnoOf(const grpc::Status &s) {
  switch (s.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return ETIMEDOUT;
    case grpc::StatusCode::UNAVAILABLE:
      return ECONNREFUSED;
    case grpc::StatusCode::NOT_FOUND:
      return ENOENT;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
      return EINVAL;
    case grpc::StatusCode::FAILED_PRECONDITION:
      return EAGAIN;
    default:
      return EIO;
  }
}

// One line: gRPC's messages may carry a debug string with newlines.
std::string OneLine(std::string s) {
  for (char &c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

EtcdKeyValue FromPb(const pb::KeyValue &kv) {
  EtcdKeyValue out;
  out.key = kv.key();
  out.value = kv.value();
  out.create_revision = kv.create_revision();
  out.mod_revision = kv.mod_revision();
  out.version = kv.version();
  out.lease = kv.lease();
  return out;
}

void ToPb(const EtcdCompare &c, pb::Compare *out) {
  out->set_key(c.key);
  out->set_result(static_cast<pb::Compare::CompareResult>(c.op));
  out->set_target(static_cast<pb::Compare::CompareTarget>(c.target));
  switch (c.target) {
    case EtcdCompare::kVersion:
      out->set_version(c.number);
      break;
    case EtcdCompare::kCreate:
      out->set_create_revision(c.number);
      break;
    case EtcdCompare::kMod:
      out->set_mod_revision(c.number);
      break;
    case EtcdCompare::kValue:
      out->set_value(c.value);
      break;
    case EtcdCompare::kLease:
      out->set_lease(c.number);
      break;
  }
}

void ToPb(const EtcdOp &op, pb::RequestOp *out) {
  switch (op.kind) {
    case EtcdOp::kGet: {
      pb::RangeRequest *r = out->mutable_request_range();
      r->set_key(op.key);
      if (op.prefix) r->set_range_end(EtcdPrefixEnd(op.key));
      break;
    }
    case EtcdOp::kPut: {
      pb::PutRequest *p = out->mutable_request_put();
      p->set_key(op.key);
      p->set_value(op.value);
      p->set_lease(op.lease);
      break;
    }
    case EtcdOp::kDelete: {
      pb::DeleteRangeRequest *d = out->mutable_request_delete_range();
      d->set_key(op.key);
      if (op.prefix) d->set_range_end(EtcdPrefixEnd(op.key));
      break;
    }
  }
}

}  // namespace

std::vector<std::string> ParseEtcdEndpoints(const std::string &list) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    std::string e = list.substr(pos, comma - pos);
    if (e.rfind("http://", 0) == 0) e = e.substr(7);
    while (!e.empty() && e.back() == '/') e.pop_back();
    if (!e.empty()) out.push_back(e);
    pos = comma + 1;
  }
  return out;
}

std::string EtcdPrefixEnd(const std::string &prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(end.back() + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

struct EtcdClient::Impl {
  EtcdOptions options;
  std::vector<std::unique_ptr<pb::KV::Stub>> kv;
  std::vector<std::unique_ptr<pb::Lease::Stub>> lease;
  std::atomic<size_t> current{0};  // the endpoint that last answered

  // Runs `call(endpoint index, context)` on the endpoints in turn, from the
  // current one, until one answers or the deadline passes; each attempt
  // gets an equal share of what is left, so that one endpoint that never
  // answers cannot use up the whole deadline.
  template <typename F>
  Status Attempt(const char *what, F call) {
    const size_t n = kv.size();
    const auto deadline =
        std::chrono::system_clock::now() + std::chrono::milliseconds(options.call_timeout_ms);
    const size_t start = current.load(std::memory_order_relaxed);
    grpc::Status last;
    std::string last_endpoint;
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (start + k) % n;
      const auto now = std::chrono::system_clock::now();
      if (now >= deadline) break;
      grpc::ClientContext ctx;
      ctx.set_deadline(now + (deadline - now) / static_cast<int>(n - k));
      last = call(i, &ctx);
      last_endpoint = options.endpoints[i];
      if (last.ok()) {
        current.store(i, std::memory_order_relaxed);
        return Status::Ok();
      }
      if (!TryNext(last)) break;
    }
    if (last_endpoint.empty()) last = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "no time");
    return Status::Error(ErrnoOf(last), "etcd " + std::string(what) + " at " + last_endpoint +
                                            ": " + OneLine(last.error_message()));
  }
};

EtcdClient::EtcdClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EtcdClient::~EtcdClient() = default;

Result<std::unique_ptr<EtcdClient>> EtcdClient::Create(const EtcdOptions &options) {
  if (options.endpoints.empty()) return Status::Error(EINVAL, "no etcd endpoints");
  if (options.call_timeout_ms <= 0) return Status::Error(EINVAL, "etcd call timeout must be > 0");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  for (const std::string &e : options.endpoints) {
    if (e.find(':') == std::string::npos || e.find_first_of(" \t,") != std::string::npos)
      return Status::Error(EINVAL, "bad etcd endpoint '" + e + "' (want host:port)");
    std::shared_ptr<grpc::Channel> channel = NewChannel(e);
    impl->kv.push_back(pb::KV::NewStub(channel));
    impl->lease.push_back(pb::Lease::NewStub(channel));
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(impl)));
}

const std::vector<std::string> &EtcdClient::endpoints() const {
  return impl_->options.endpoints;
}

Result<EtcdKeyValue> EtcdClient::Get(const std::string &key) {
  pb::RangeRequest req;
  req.set_key(key);
  pb::RangeResponse rep;
  MARU_RETURN_IF_ERROR(impl_->Attempt("get", [&](size_t i, grpc::ClientContext *ctx) {
    return impl_->kv[i]->Range(ctx, req, &rep);
  }));
  if (rep.kvs_size() == 0) {
    EtcdKeyValue none;
    none.key = key;
    return none;
  }
  return FromPb(rep.kvs(0));
}

Result<std::vector<EtcdKeyValue>> EtcdClient::GetPrefix(const std::string &prefix) {
  pb::RangeRequest req;
  req.set_key(prefix);
  req.set_range_end(EtcdPrefixEnd(prefix));
  pb::RangeResponse rep;
  MARU_RETURN_IF_ERROR(impl_->Attempt("get", [&](size_t i, grpc::ClientContext *ctx) {
    return impl_->kv[i]->Range(ctx, req, &rep);
  }));
  std::vector<EtcdKeyValue> out;
  for (const pb::KeyValue &kv : rep.kvs()) out.push_back(FromPb(kv));
  return out;
}

Status EtcdClient::Put(const std::string &key, const std::string &value, int64_t lease) {
  pb::PutRequest req;
  req.set_key(key);
  req.set_value(value);
  req.set_lease(lease);
  pb::PutResponse rep;
  return impl_->Attempt(
      "put", [&](size_t i, grpc::ClientContext *ctx) { return impl_->kv[i]->Put(ctx, req, &rep); });
}

Status EtcdClient::Delete(const std::string &key) {
  pb::DeleteRangeRequest req;
  req.set_key(key);
  pb::DeleteRangeResponse rep;
  return impl_->Attempt("delete", [&](size_t i, grpc::ClientContext *ctx) {
    return impl_->kv[i]->DeleteRange(ctx, req, &rep);
  });
}

Result<EtcdTxnResult> EtcdClient::Txn(const std::vector<EtcdCompare> &compares,
                                      const std::vector<EtcdOp> &success,
                                      const std::vector<EtcdOp> &failure) {
  pb::TxnRequest req;
  for (const EtcdCompare &c : compares) ToPb(c, req.add_compare());
  for (const EtcdOp &op : success) ToPb(op, req.add_success());
  for (const EtcdOp &op : failure) ToPb(op, req.add_failure());
  pb::TxnResponse rep;
  MARU_RETURN_IF_ERROR(impl_->Attempt("txn", [&](size_t i, grpc::ClientContext *ctx) {
    return impl_->kv[i]->Txn(ctx, req, &rep);
  }));
  EtcdTxnResult out;
  out.succeeded = rep.succeeded();
  for (const pb::ResponseOp &r : rep.responses()) {
    if (!r.has_response_range()) continue;
    std::vector<EtcdKeyValue> kvs;
    for (const pb::KeyValue &kv : r.response_range().kvs()) kvs.push_back(FromPb(kv));
    out.gets.push_back(std::move(kvs));
  }
  return out;
}

Result<EtcdLease> EtcdClient::LeaseGrant(int64_t ttl_s) {
  pb::LeaseGrantRequest req;
  req.set_ttl(ttl_s);
  pb::LeaseGrantResponse rep;
  MARU_RETURN_IF_ERROR(impl_->Attempt("lease grant", [&](size_t i, grpc::ClientContext *ctx) {
    return impl_->lease[i]->LeaseGrant(ctx, req, &rep);
  }));
  if (!rep.error().empty()) return Status::Error(EIO, "etcd lease grant: " + OneLine(rep.error()));
  return EtcdLease{rep.id(), rep.ttl()};
}

Status EtcdClient::LeaseRevoke(int64_t id) {
  pb::LeaseRevokeRequest req;
  req.set_id(id);
  pb::LeaseRevokeResponse rep;
  return impl_->Attempt("lease revoke", [&](size_t i, grpc::ClientContext *ctx) {
    return impl_->lease[i]->LeaseRevoke(ctx, req, &rep);
  });
}

Result<int64_t> EtcdClient::LeaseKeepAlive(int64_t id) {
  pb::LeaseKeepAliveRequest req;
  req.set_id(id);
  pb::LeaseKeepAliveResponse rep;
  MARU_RETURN_IF_ERROR(impl_->Attempt("lease keep-alive", [&](size_t i, grpc::ClientContext *ctx) {
    // One renewal per stream: a stream kept open would need a thread of its
    // own to notice that it stopped answering.
    auto stream = impl_->lease[i]->LeaseKeepAlive(ctx);
    if (stream->Write(req) && stream->Read(&rep)) {
      stream->WritesDone();
      ctx->TryCancel();
      stream->Finish().IgnoreError();
      return grpc::Status::OK;
    }
    stream->WritesDone();
    grpc::Status s = stream->Finish();
    return s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "keep-alive stream closed") : s;
  }));
  if (rep.ttl() <= 0) return Status::Error(ENOENT, "etcd lease expired");
  return rep.ttl();
}

Result<int64_t> EtcdClient::LeaseTimeToLive(int64_t id) {
  pb::LeaseTimeToLiveRequest req;
  req.set_id(id);
  pb::LeaseTimeToLiveResponse rep;
  MARU_RETURN_IF_ERROR(
      impl_->Attempt("lease time-to-live", [&](size_t i, grpc::ClientContext *ctx) {
        return impl_->lease[i]->LeaseTimeToLive(ctx, req, &rep);
      }));
  // 0: less than a second left; -1: gone.
  if (rep.ttl() < 0) return Status::Error(ENOENT, "etcd lease expired");
  return rep.ttl();
}

}  // namespace maru
