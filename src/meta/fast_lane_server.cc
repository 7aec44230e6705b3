#include "meta/fast_lane_server.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>
#include <system_error>

#include "fast_lane.h"
#include "util/frame.h"
#include "util/log.h"
#include "util/units.h"

namespace maru {

FastLaneServer::FastLaneServer(std::string path, MetaEngine *engine, IdentityPolicy policy)
    : path_(std::move(path)), engine_(engine), policy_(policy) {
  // Counted with the same operations over gRPC.
  slots_[fastlane::kLookupPrefix] = engine_->op_stats().Register("LookupPrefix");
  slots_[fastlane::kOpen] = engine_->op_stats().Register("Open");
  slots_[fastlane::kRelease] = engine_->op_stats().Register("Release");
  slots_[fastlane::kCreate] = engine_->op_stats().Register("Create");
  slots_[fastlane::kSeal] = engine_->op_stats().Register("Seal");
  slots_[fastlane::kAbort] = engine_->op_stats().Register("Abort");
  slots_[fastlane::kCreateBatch] = engine_->op_stats().Register("CreateBatch");
  slots_[fastlane::kSealBatch] = engine_->op_stats().Register("SealBatch");
  slots_[fastlane::kCountPrefix] = engine_->op_stats().Register("CountPrefix");
  slots_[fastlane::kAlloc] = engine_->op_stats().Register("Alloc");
  slots_[fastlane::kPublish] = engine_->op_stats().Register("Publish");
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto &c : connections_)
      if (c->fd >= 0) shutdown(c->fd, SHUT_RDWR);
  }
  for (auto &c : connections_)
    if (c->thread.joinable()) c->thread.join();
  connections_.clear();
}

void FastLaneServer::Accept(int fd) {
  std::optional<PeerCredentials> peer = ReadPeerCredentials(fd);
  if (!peer) {
    close(fd);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
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
  if (connections_.size() >= kMaxConnections) {
    LOG_WARN("fast lane: %zu connections open, refusing one from pid %d", connections_.size(),
             peer->pid);
    close(fd);
    return;
  }
  // A client reconnects (or falls back to gRPC) when it finds its idle
  // connection closed, so dropping idle ones costs it nothing.
  timeval idle{kIdleTimeoutSeconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof(idle));
  auto c = std::make_unique<Connection>();
  c->fd = fd;
  c->peer = *peer;
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

namespace {

// Parses a request, runs it on the engine as its caller, serializes the reply.
template <typename Req, typename Rep>
bool RunOne(MetaEngine *engine, void (MetaEngine::*op)(const Caller &, const Req &, Rep *),
            const PeerCredentials &peer, const IdentityPolicy &policy, const std::string &in,
            std::string *out, int *error) {
  Req req;
  Rep rep;
  if (!req.ParseFromString(in)) return false;
  (engine->*op)(ResolveCaller(peer, req.header(), policy), req, &rep);
  rep.SerializeToString(out);
  *error = rep.error();
  return true;
}

}  // namespace

bool FastLaneServer::Dispatch(const PeerCredentials &peer, uint8_t op, const std::string &in,
                              std::string *out) {
  const int64_t start = MonotonicNs();
  int error = 0;
  bool parsed;
  switch (op) {
    case fastlane::kLookupPrefix:
      parsed = RunOne(engine_, &MetaEngine::LookupPrefix, peer, policy_, in, out, &error);
      break;
    case fastlane::kOpen:
      parsed = RunOne(engine_, &MetaEngine::Open, peer, policy_, in, out, &error);
      break;
    case fastlane::kRelease:
      parsed = RunOne(engine_, &MetaEngine::Release, peer, policy_, in, out, &error);
      break;
    case fastlane::kCreate:
      parsed = RunOne(engine_, &MetaEngine::Create, peer, policy_, in, out, &error);
      break;
    case fastlane::kSeal:
      parsed = RunOne(engine_, &MetaEngine::Seal, peer, policy_, in, out, &error);
      break;
    case fastlane::kAbort:
      parsed = RunOne(engine_, &MetaEngine::Abort, peer, policy_, in, out, &error);
      break;
    case fastlane::kCreateBatch:
      parsed = RunOne(engine_, &MetaEngine::CreateBatch, peer, policy_, in, out, &error);
      break;
    case fastlane::kSealBatch:
      parsed = RunOne(engine_, &MetaEngine::SealBatch, peer, policy_, in, out, &error);
      break;
    case fastlane::kCountPrefix:
      parsed = RunOne(engine_, &MetaEngine::CountPrefix, peer, policy_, in, out, &error);
      break;
    case fastlane::kAlloc:
      parsed = RunOne(engine_, &MetaEngine::Alloc, peer, policy_, in, out, &error);
      break;
    case fastlane::kPublish:
      parsed = RunOne(engine_, &MetaEngine::Publish, peer, policy_, in, out, &error);
      break;
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
    out.clear();
    if (!Dispatch(conn->peer, op, in, &out)) {
      WriteFrame(conn->fd, fastlane::kBadFrame, "");
      break;  // a client that sends garbage loses its connection, nothing else
    }
    if (!WriteFrame(conn->fd, fastlane::kReplyOk, out).ok()) break;
  }
  std::lock_guard<std::mutex> lock(mu_);
  close(conn->fd);
  conn->fd = -1;
}

}  // namespace maru
