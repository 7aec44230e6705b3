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

namespace {

// What a TCP caller presented: its verified certificate's names (gRPC puts
// them in the auth context only after verifying the chain against the
// client CA) and an "authorization: Bearer TOKEN" header.
TcpProof ProofOf(grpc::CallbackServerContext *ctx) {
  TcpProof proof;
  std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  if (auth && auth->IsPeerAuthenticated()) {
    for (const grpc::string_ref &cn : auth->FindPropertyValues("x509_common_name"))
      proof.cert_names.push_back("CN=" + std::string(cn.data(), cn.size()));
    for (const grpc::string_ref &san : auth->FindPropertyValues("x509_subject_alternative_name"))
      proof.cert_names.push_back("SAN=" + std::string(san.data(), san.size()));
  }
  constexpr std::string_view kBearer = "Bearer ";
  const auto &metadata = ctx->client_metadata();
  auto it = metadata.find("authorization");
  if (it != metadata.end()) {
    std::string_view value(it->second.data(), it->second.size());
    if (value.starts_with(kBearer)) value.remove_prefix(kBearer.size());
    proof.token = std::string(value);
  }
  return proof;
}

}  // namespace

Result<Caller> MetaService::CallerOf(grpc::CallbackServerContext *ctx,
                                     const rpc::Header &header) const {
  const std::string peer = ctx->peer();
  if (peer.rfind("fd:", 0) == 0) return ResolveCaller(peers_->Identify(peer), header, policy_);
  Result<Peer> tcp = peers_->Identify(peer, ProofOf(ctx), policy_);
  if (!tcp.ok()) return tcp.status();
  return ResolveCaller(*tcp, header, policy_);
}

bool MetaService::RefusedAsStandby(grpc::ServerUnaryReactor *reactor) const {
  if (!gate_ || gate_->leading()) return false;
  reactor->Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, gate_->Refusal()));
  return true;
}

void MetaService::Decorate(grpc::CallbackServerContext *ctx, rpc::OpenSessionReply *rep) {
  if (gate_) rep->set_leader_epoch(gate_->epoch());
  if (!tickets_ || rep->error() != 0) return;
  const std::string peer = ctx->peer();
  if (peer.rfind("fd:", 0) == 0) return;  // Unix: the socket beside gRPC's
  // The peer's own proven identity (not whom a root peer asserts): the
  // lane resolves each request's caller from it, as gRPC does.
  Result<Peer> tcp = peers_->Identify(peer, ProofOf(ctx), policy_);
  if (!tcp.ok() || tcp->kind() != Peer::Kind::kTcpAuthenticated) return;
  const std::string ticket = tickets_->Mint({rep->session(), tcp->creds().uid, tcp->creds().gid});
  if (ticket.empty()) return;
  rep->set_fast_lane_port(static_cast<uint32_t>(tcp_fast_lane_port_));
  rep->set_fast_lane_ticket(ticket);
}

#define MARU_RPC(Name, Req, Rep)                                                           \
  grpc::ServerUnaryReactor *MetaService::Name(grpc::CallbackServerContext *ctx,            \
                                              const rpc::Req *req, rpc::Rep *rep) {        \
    const int64_t start = MonotonicNs();                                                   \
    grpc::ServerUnaryReactor *reactor = ctx->DefaultReactor();                             \
    if (RefusedAsStandby(reactor)) return reactor;                                         \
    Result<Caller> caller = CallerOf(ctx, req->header());                                  \
    if (!caller.ok()) {                                                                    \
      reactor->Finish(grpc::Status(grpc::StatusCode::UNAUTHENTICATED,                      \
                                   "maru-server: " + caller.status().message()));          \
      return reactor;                                                                      \
    }                                                                                      \
    engine_->Name(*caller, *req, rep);                                                     \
    Decorate(ctx, rep);                                                                    \
    engine_->op_stats().Record(slots_[k##Name], MonotonicNs() - start, rep->error() != 0); \
    reactor->Finish(grpc::Status::OK);                                                     \
    return reactor;                                                                        \
  }
#include "meta/rpc_list.inc"
#undef MARU_RPC

}  // namespace maru
