// The gRPC face of MetaEngine: decides who the caller is, times the call,
// and hands it to the engine. A request never throws or crashes the
// server: malformed input becomes an errno in the reply.
#pragma once

#include "maru.grpc.pb.h"
#include "meta/meta_engine.h"
#include "meta/peer_registry.h"

namespace maru {

struct IdentityPolicy {
  // TCP peers cannot be identified by the kernel. By default their asserted
  // identity is trusted (as NFS AUTH_SYS does); with squash, every TCP
  // caller is nobody.
  bool squash_tcp = false;
};

class MetaService final : public rpc::Meta::CallbackService {
 public:
  MetaService(MetaEngine *engine, const PeerRegistry *peers, IdentityPolicy policy);

#define MARU_RPC(Name, Req, Rep)                                                              \
  grpc::ServerUnaryReactor *Name(grpc::CallbackServerContext *ctx, const rpc::Req *req,       \
                                 rpc::Rep *rep) override;
#include "meta/rpc_list.inc"
#undef MARU_RPC

 private:
  enum Slot {
#define MARU_RPC(Name, Req, Rep) k##Name,
#include "meta/rpc_list.inc"
#undef MARU_RPC
  };
  Caller CallerOf(grpc::CallbackServerContext *ctx, const rpc::Header &header) const;

  MetaEngine *engine_;
  const PeerRegistry *peers_;
  IdentityPolicy policy_;
  std::vector<int> slots_;
};

}  // namespace maru
