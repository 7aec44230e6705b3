#include "meta/fast_lane_server.h"

#include <algorithm>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>
#include <system_error>

#include "proto/fast_lane.h"
#include "util/clock.h"
#include "util/frame.h"
#include "util/log.h"

namespace maru {

FastLaneServer::FastLaneServer(std::string path, MetaEngine *engine, IdentityPolicy policy,
                               size_t max_connections, CpuWakeLatency *wake)
    : path_(std::move(path)),
      max_connections_(std::min(max_connections, kMaxConnections)),
      engine_(engine),
      policy_(policy),
      wake_(wake) {
  // Counted with the same operations over gRPC.
#define MARU_FAST_OP(Code, Name, Req, Rep) \
  slots_[fastlane::k##Name] = engine_->op_stats().Register(#Name);
#include "proto/fast_lane_ops.inc"
#undef MARU_FAST_OP
}

FastLaneServer::FastLaneServer(std::string host_port, MetaEngine *engine, IdentityPolicy policy,
                               TcpDoor door, size_t max_connections, CpuWakeLatency *wake)
    : FastLaneServer(std::move(host_port), engine, std::move(policy), max_connections, wake) {
  door_ = door;
  tcp_slot_ = engine_->op_stats().Register("FastLaneTcp");
  hello_slot_ = engine_->op_stats().Register("FastLaneTcpHello");
}

FastLaneServer::~FastLaneServer() {
  Stop();
}

Status FastLaneServer::Bind() {
  if (door_.tickets) {
    Result<std::unique_ptr<Acceptor>> a = Acceptor::ListenTcp(path_);
    if (!a.ok()) return a.status();
    acceptor_ = std::move(*a);
    return Status::Ok();
  }
  unlink(path_.c_str());  // ours: the gRPC socket beside it was checked already
  Result<std::unique_ptr<Acceptor>> a = Acceptor::ListenUnix(path_);
  if (!a.ok()) return a.status();
  acceptor_ = std::move(*a);
  return Status::Ok();
}

void FastLaneServer::Start() {
  acceptor_->Start([this](int fd) { Accept(fd); });
}

void FastLaneServer::Stop() {
  if (acceptor_) acceptor_->Stop();
  std::vector<std::unique_ptr<Connection>> all;
  {
    MutexLock lock(&mu_);
    for (auto &c : connections_)
      if (c->fd >= 0) shutdown(c->fd, SHUT_RDWR);
    all.swap(connections_);
  }
  for (auto &c : all)
    if (c->thread.joinable()) c->thread.join();
}

std::optional<Peer> FastLaneServer::AcceptTcp(int fd, std::string *address) {
  *address = TcpPeerAddress(fd);
  // The same caps as the TCP listeners': per listener, per peer address,
  // and the descriptors' share of TCP.
  if (!door_.gate->AdmitTcp(kTcpListener, *address)) return std::nullopt;
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  return Peer::Tcp();  // nobody, until its ticket says otherwise
}

void FastLaneServer::Accept(int fd) {
  std::string address;
  std::optional<Peer> peer;
  if (door_.tickets) {
    peer = AcceptTcp(fd, &address);
  } else if (std::optional<PeerCredentials> creds = ReadPeerCredentials(fd)) {
    peer = Peer::Unix(*creds);
  }
  if (!peer) {
    close(fd);
    return;
  }
  auto refuse = [&] {
    close(fd);
    if (door_.tickets) door_.gate->LeaveTcp(kTcpListener, address);
  };
  MutexLock lock(&mu_);
  // Reap the threads of connections that ended.
  for (auto it = connections_.begin(); it != connections_.end();) {
    if ((*it)->fd < 0) {
      (*it)->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
  // Each connection holds a thread; a client opening sockets in a loop must
  // not exhaust the server. Clients fall back to gRPC when refused.
  if (connections_.size() >= max_connections_) {
    LOG_WARN("fast lane %s: %zu connections open, refusing one", path_.c_str(),
             connections_.size());
    return refuse();
  }
  // A client reconnects (or falls back to gRPC) when it finds its idle
  // connection closed, so dropping idle ones costs it nothing. A TCP one
  // has less time to present its ticket.
  timeval idle{door_.tickets ? kHelloTimeoutSeconds : kIdleTimeoutSeconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof(idle));
  auto c = std::unique_ptr<Connection>(new Connection{fd, *peer, {}, address, 0});
  Connection *raw = c.get();
  try {
    c->thread = std::thread([this, raw] { Serve(raw); });
  } catch (const std::system_error &e) {
    LOG_WARN("fast lane: cannot start a thread for a connection: %s", e.what());
    return refuse();
  }
  connections_.push_back(std::move(c));
}

bool FastLaneServer::Hello(Connection *conn) {
  uint8_t code = 0;
  std::string in;
  if (!ReadFrame(conn->fd, &code, &in, fastlane::kMaxHello).ok() || code != fastlane::kHello)
    return false;
  std::optional<FastLaneTickets::Grant> grant =
      door_.tickets->Redeem(in.substr(0, FastLaneTickets::kTicketBytes));
  if (!grant) return false;
  // A caller with a token proves again who it is: a ticket taken from
  // another uid's process is of no use to it.
  if (in.size() > FastLaneTickets::kTicketBytes) {
    TcpProof proof;
    proof.token = in.substr(FastLaneTickets::kTicketBytes);
    Result<Peer> p = IdentifyTcp(proof, policy_);
    if (!p.ok() || p->kind() != Peer::Kind::kTcpAuthenticated || p->creds().uid != grant->uid ||
        p->creds().gid != grant->gid)
      return false;
  }
  const Peer peer = Peer::TcpAuthenticated(grant->uid, grant->gid);
  // The session must still be live and this uid's: a ticket ends with it.
  rpc::HeartbeatRequest beat;
  beat.mutable_header()->set_session(grant->session);
  rpc::HeartbeatReply alive;
  engine_->Heartbeat(ResolveCaller(peer, beat.header(), policy_), beat, &alive);
  if (alive.error() != 0) return false;
  if (!WriteFrame(conn->fd, fastlane::kReplyOk, door_.tickets->Mint(*grant)).ok()) return false;
  conn->peer = peer;
  conn->session = grant->session;
  timeval idle{kIdleTimeoutSeconds, 0};
  setsockopt(conn->fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof(idle));
  return true;
}

template <typename Req, typename Rep>
bool FastLaneServer::RunOne(void (MetaEngine::*op)(const Caller &, const Req &, Rep *),
                            const Peer &peer, const std::string &in, uint64_t session,
                            std::string *out, int *error) {
  Req req;
  Rep rep;
  if (!req.ParseFromString(in)) return false;
  if (session != 0 && req.header().session() != session) return false;
  (engine_->*op)(ResolveCaller(peer, req.header(), policy_), req, &rep);
  rep.SerializeToString(out);
  *error = rep.error();
  return true;
}

bool FastLaneServer::Dispatch(const Peer &peer, uint8_t op, const std::string &in, std::string *out,
                              uint64_t session) {
  const int64_t start = MonotonicNs();
  int error = 0;
  bool parsed;
  switch (op) {
#define MARU_FAST_OP(Code, Name, Req, Rep)                                                  \
  case fastlane::k##Name:                                                                   \
    parsed = RunOne<rpc::Req, rpc::Rep>(&MetaEngine::Name, peer, in, session, out, &error); \
    break;
#include "proto/fast_lane_ops.inc"
#undef MARU_FAST_OP
    default:
      return false;
  }
  if (parsed) engine_->op_stats().Record(slots_[op], MonotonicNs() - start, error != 0);
  if (session != 0) engine_->op_stats().Record(tcp_slot_, MonotonicNs() - start, !parsed);
  return parsed;
}

void FastLaneServer::Serve(Connection *conn) {
  std::string in, out;
  if (door_.tickets) {
    const int64_t start = MonotonicNs();
    const bool admitted = Hello(conn);
    engine_->op_stats().Record(hello_slot_, MonotonicNs() - start, !admitted);
    if (!admitted) {
      WriteFrame(conn->fd, fastlane::kBadFrame, "");
      return End(conn);
    }
  }
  for (;;) {
    uint8_t op;
    if (!ReadFrame(conn->fd, &op, &in, fastlane::kMaxPayload).ok()) break;
    if (wake_) wake_->NoteRequest();
    if (gate_ && !gate_->leading()) break;
    out.clear();
    if (!Dispatch(conn->peer, op, in, &out, conn->session)) {
      WriteFrame(conn->fd, fastlane::kBadFrame, "");
      break;  // a client that sends garbage loses its connection, nothing else
    }
    if (!WriteFrame(conn->fd, fastlane::kReplyOk, out).ok()) break;
  }
  End(conn);
}

void FastLaneServer::End(Connection *conn) {
  if (door_.tickets) door_.gate->LeaveTcp(kTcpListener, conn->address);
  MutexLock lock(&mu_);
  close(conn->fd);
  conn->fd = -1;
}

}  // namespace maru
