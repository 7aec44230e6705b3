// The gRPC face of MetaEngine: asks meta/identity.h who the caller is,
// times the call, and hands it to the engine. A request never throws or
// crashes the server: malformed input becomes an errno in the reply.
#pragma once

#include <google/protobuf/arena.h>
#include <grpcpp/support/message_allocator.h>

#include "ha/leader_gate.h"
#include "meta/fast_lane_tickets.h"
#include "meta/identity.h"
#include "meta/meta_engine.h"
#include "proto/maru.grpc.pb.h"

namespace maru {

class MetaService final : public rpc::Meta::CallbackService {
 public:
  MetaService(MetaEngine *engine, const PeerRegistry *peers, IdentityPolicy policy);
  // With a gate, every call is refused while the gate says this server does
  // not lead (ha/leader_gate.h); without one (a server alone), none is.
  void set_leader_gate(const LeaderGate *gate) { gate_ = gate; }

  // Hands each authenticated TCP caller's new session a ticket to the fast
  // lane over TCP (meta/fast_lane_tickets.h), which listens on `port`.
  void EnableTcpFastLane(FastLaneTickets *tickets, int port) {
    tickets_ = tickets;
    tcp_fast_lane_port_ = port;
  }

#define MARU_RPC(Name, Req, Rep)                                                        \
  grpc::ServerUnaryReactor *Name(grpc::CallbackServerContext *ctx, const rpc::Req *req, \
                                 rpc::Rep *rep) override;
#include "meta/rpc_list.inc"
#undef MARU_RPC

 private:
  enum Slot {
#define MARU_RPC(Name, Req, Rep) k##Name,
#include "meta/rpc_list.inc"
#undef MARU_RPC
  };
  // Requests and replies live in an arena per call: a batched lookup builds
  // hundreds of small messages, and one arena frees them all at once.
  template <typename Req, typename Rep>
  class ArenaAllocator : public grpc::MessageAllocator<Req, Rep> {
    class Holder : public grpc::MessageHolder<Req, Rep> {
     public:
      Holder() {
        this->set_request(google::protobuf::Arena::CreateMessage<Req>(&arena_));
        this->set_response(google::protobuf::Arena::CreateMessage<Rep>(&arena_));
      }
      void Release() override { delete this; }

     private:
      google::protobuf::Arena arena_;
    };

   public:
    grpc::MessageHolder<Req, Rep> *AllocateMessages() override { return new Holder(); }
  };

  // The caller, or why a TCP caller is refused (a token nobody issued).
  Result<Caller> CallerOf(grpc::CallbackServerContext *ctx, const rpc::Header &header) const;
  // True (the call finished with FAILED_PRECONDITION, naming the leader if
  // known) when a gate says this server does not lead.
  bool RefusedAsStandby(grpc::ServerUnaryReactor *reactor) const;
  // What a reply gets besides the engine's: nothing, but for a session the
  // epoch this server leads with and, opened over TCP, the fast lane's port
  // and a ticket to it.
  template <typename Rep>
  void Decorate(grpc::CallbackServerContext *, Rep *) {}
  void Decorate(grpc::CallbackServerContext *ctx, rpc::OpenSessionReply *rep);

  MetaEngine *engine_;
  const PeerRegistry *peers_;
  IdentityPolicy policy_;
  const LeaderGate *gate_ = nullptr;
  FastLaneTickets *tickets_ = nullptr;
  int tcp_fast_lane_port_ = 0;
  std::vector<int> slots_;
#define MARU_RPC(Name, Req, Rep) ArenaAllocator<rpc::Req, rpc::Rep> allocator_##Name;
#include "meta/rpc_list.inc"
#undef MARU_RPC
};

}  // namespace maru
