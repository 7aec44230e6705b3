#include "meta/meta_service.h"

#include "util/clock.h"

namespace maru {

MetaService::MetaService(MetaEngine *engine, const PeerRegistry *peers, IdentityPolicy policy)
    : engine_(engine), peers_(peers), policy_(policy) {
#define MARU_RPC(Name, Req, Rep)                         \
  slots_.push_back(engine_->op_stats().Register(#Name)); \
  SetMessageAllocatorFor_##Name(&allocator_##Name);
#include "meta/rpc_list.inc"
#undef MARU_RPC
}

Caller MetaService::CallerOf(grpc::CallbackServerContext *ctx, const rpc::Header &header) const {
  return ResolveCaller(peers_->Identify(ctx->peer()), header, policy_);
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
