#include "meta/fast_lane_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

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
}

FastLaneServer::~FastLaneServer() {
  Stop();
}

Status FastLaneServer::Bind() {
  unlink(path_.c_str());  // ours: the gRPC socket beside it was checked already
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return Status::Error(errno, "socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path_.size() >= sizeof(addr.sun_path)) return Status::Error(ENAMETOOLONG, path_);
  strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
  if (bind(fd_, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) < 0)
    return Status::Error(errno, "cannot bind " + path_);
  chmod(path_.c_str(), 0666);
  if (listen(fd_, 512) < 0) return Status::Error(errno, "cannot listen on " + path_);
  if (pipe2(wake_, O_CLOEXEC) < 0) return Status::Error(errno, "pipe");
  return Status::Ok();
}

void FastLaneServer::Start() {
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

void FastLaneServer::Stop() {
  if (accept_thread_.joinable()) {
    char b = 0;
    (void)!write(wake_[1], &b, 1);
    accept_thread_.join();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto &c : connections_) shutdown(c->fd, SHUT_RDWR);
  }
  for (auto &c : connections_)
    if (c->thread.joinable()) c->thread.join();
  for (auto &c : connections_) close(c->fd);
  connections_.clear();
  if (fd_ >= 0) {
    close(fd_);
    unlink(path_.c_str());
    fd_ = -1;
  }
  for (int &w : wake_)
    if (w >= 0) close(w), w = -1;
}

void FastLaneServer::AcceptLoop() {
  for (;;) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents) return;
    if (!(fds[0].revents & POLLIN)) continue;
    int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    std::optional<PeerCredentials> peer = ReadPeerCredentials(conn);
    if (!peer) {
      close(conn);
      continue;
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
    auto c = std::make_unique<Connection>();
    c->fd = conn;
    c->peer = *peer;
    Connection *raw = c.get();
    c->thread = std::thread([this, raw] { Serve(raw); });
    connections_.push_back(std::move(c));
  }
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
