#include "meta/meta_service.h"

#include "util/clock.h"

namespace maru {
namespace {

constexpr uint32_t kNobody = 65534;

}  // namespace

MetaService::MetaService(MetaEngine *engine, const PeerRegistry *peers, IdentityPolicy policy)
    : engine_(engine), peers_(peers), policy_(policy) {
#define MARU_RPC(Name, Req, Rep)                         \
  slots_.push_back(engine_->op_stats().Register(#Name)); \
  SetMessageAllocatorFor_##Name(&allocator_##Name);
#include "meta/rpc_list.inc"
#undef MARU_RPC
}

Caller MetaService::CallerOf(grpc::CallbackServerContext *ctx, const rpc::Header &header) const {
  std::optional<PeerCredentials> peer = peers_->Lookup(ctx->peer());
  // A local connection whose credentials went missing speaks for nobody.
  if (!peer && ctx->peer().rfind("fd:", 0) == 0) peer = PeerCredentials{0, kNobody, kNobody, {}};
  return ResolveCaller(peer, header, policy_);
}

Caller ResolveCaller(const std::optional<PeerCredentials> &peer, const rpc::Header &header,
                     const IdentityPolicy &policy) {
  Caller c;
  const rpc::Caller &asserted = header.caller();
  bool trusted;
  if (peer) {
    c.uid = peer->uid;
    c.gid = peer->gid;
    c.groups = peer->groups;
    c.pid = static_cast<uint32_t>(peer->pid);
    trusted = peer->uid == 0;  // a root daemon (maru-fuse) speaks for its callers
  } else {
    c.uid = c.gid = policy.squash_tcp ? kNobody : 0;
    trusted = !policy.squash_tcp;
  }
  if (trusted && asserted.set()) {
    c.uid = asserted.uid();
    c.gid = asserted.gid();
    c.groups.assign(asserted.groups().begin(), asserted.groups().end());
    c.pid = asserted.pid();
  }
  return c;
}

#define MARU_RPC(Name, Req, Rep)                                                           \
  grpc::ServerUnaryReactor *MetaService::Name(grpc::CallbackServerContext *ctx,            \
                                              const rpc::Req *req, rpc::Rep *rep) {        \
    const int64_t start = MonotonicNs();                                                   \
    engine_->Name(CallerOf(ctx, req->header()), *req, rep);                                \
    engine_->op_stats().Record(slots_[k##Name], MonotonicNs() - start, rep->error() != 0); \
    grpc::ServerUnaryReactor *reactor = ctx->DefaultReactor();                             \
    reactor->Finish(grpc::Status::OK);                                                     \
    return reactor;                                                                        \
  }
#include "meta/rpc_list.inc"
#undef MARU_RPC

}  // namespace maru
