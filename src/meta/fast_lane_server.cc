#include "meta/fast_lane_server.h"

#include <algorithm>

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

FastLaneServer::~FastLaneServer() {
  Stop();
}

Status FastLaneServer::Bind() {
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

void FastLaneServer::Accept(int fd) {
  std::optional<PeerCredentials> peer = ReadPeerCredentials(fd);
  if (!peer) {
    close(fd);
    return;
  }
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
    LOG_WARN("fast lane: %zu connections open, refusing one from pid %d", connections_.size(),
             peer->pid);
    close(fd);
    return;
  }
  // A client reconnects (or falls back to gRPC) when it finds its idle
  // connection closed, so dropping idle ones costs it nothing.
  timeval idle{kIdleTimeoutSeconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof(idle));
  auto c = std::unique_ptr<Connection>(new Connection{fd, Peer::Unix(*peer), {}});
  Connection *raw = c.get();
  try {
    c->thread = std::thread([this, raw] { Serve(raw); });
  } catch (const std::system_error &e) {
    LOG_WARN("fast lane: cannot start a thread for a connection: %s", e.what());
    close(fd);
    return;
  }
  connections_.push_back(std::move(c));
}

template <typename Req, typename Rep>
bool FastLaneServer::RunOne(void (MetaEngine::*op)(const Caller &, const Req &, Rep *),
                            const Peer &peer, const std::string &in, std::string *out, int *error) {
  Req req;
  Rep rep;
  if (!req.ParseFromString(in)) return false;
  (engine_->*op)(ResolveCaller(peer, req.header(), policy_), req, &rep);
  rep.SerializeToString(out);
  *error = rep.error();
  return true;
}

bool FastLaneServer::Dispatch(const Peer &peer, uint8_t op, const std::string &in,
                              std::string *out) {
  const int64_t start = MonotonicNs();
  int error = 0;
  bool parsed;
  switch (op) {
#define MARU_FAST_OP(Code, Name, Req, Rep)                                         \
  case fastlane::k##Name:                                                          \
    parsed = RunOne<rpc::Req, rpc::Rep>(&MetaEngine::Name, peer, in, out, &error); \
    break;
#include "proto/fast_lane_ops.inc"
#undef MARU_FAST_OP
    default:
      return false;
  }
  if (parsed) engine_->op_stats().Record(slots_[op], MonotonicNs() - start, error != 0);
  return parsed;
}

void FastLaneServer::Serve(Connection *conn) {
  std::string in, out;
  for (;;) {
    uint8_t op;
    if (!ReadFrame(conn->fd, &op, &in, fastlane::kMaxPayload).ok()) break;
    if (wake_) wake_->NoteRequest();
    if (gate_ && !gate_->leading()) break;
    out.clear();
    if (!Dispatch(conn->peer, op, in, &out)) {
      WriteFrame(conn->fd, fastlane::kBadFrame, "");
      break;  // a client that sends garbage loses its connection, nothing else
    }
    if (!WriteFrame(conn->fd, fastlane::kReplyOk, out).ok()) break;
  }
  MutexLock lock(&mu_);
  close(conn->fd);
  conn->fd = -1;
}

}  // namespace maru
