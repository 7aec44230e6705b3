#include "client/fast_lane_client.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "proto/fast_lane.h"
#include "util/frame.h"

namespace maru {

namespace {

// A socket connected to `path` (Unix) or `server` (TCP), or a negative errno.
int ConnectUnix(const std::string &path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) < 0) {
    int err = errno;
    close(fd);
    return -err;
  }
  return fd;
}

// Bounded by `tv`: on Linux SO_SNDTIMEO bounds connect() too.
int ConnectTcp(const Address &server, const timeval &tv) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(server.host.c_str(), std::to_string(server.port).c_str(), &hints, &found) != 0)
    return -EHOSTUNREACH;
  int fd = -ECONNREFUSED;
  for (addrinfo *ai = found; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      fd = -errno;
      continue;
    }
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
    const int err = errno;
    close(fd);
    fd = -err;
  }
  freeaddrinfo(found);
  if (fd >= 0) {
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

}  // namespace

FastLaneClient::FastLaneClient(std::string path, int64_t timeout_ms)
    : path_(std::move(path)), timeout_ms_(timeout_ms) {}

FastLaneClient::FastLaneClient(Address server, std::string token, std::string ticket,
                               int64_t timeout_ms)
    : server_(std::move(server)), tcp_(true), token_(std::move(token)), timeout_ms_(timeout_ms) {
  ticket_ = std::move(ticket);
}

void FastLaneClient::SetTicket(std::string ticket) {
  MutexLock lock(&mu_);
  ticket_ = std::move(ticket);
}

FastLaneClient::~FastLaneClient() {
  for (int fd : idle_) close(fd);
}

int FastLaneClient::Checkout() {
  {
    MutexLock lock(&mu_);
    if (!idle_.empty()) {
      int fd = idle_.back();
      idle_.pop_back();
      return fd;
    }
  }
  const int fd = Connect();
  if (fd < 0 || !tcp_) return fd;
  const int rc = Hello(fd);
  if (rc < 0) {
    close(fd);
    return rc;
  }
  return fd;
}

int FastLaneClient::Connect() {
  // A server that stops answering must not hang the caller.
  timeval tv{timeout_ms_ / 1000, static_cast<suseconds_t>((timeout_ms_ % 1000) * 1000)};
  const int fd = tcp_ ? ConnectTcp(server_, tv) : ConnectUnix(path_);
  if (fd < 0) return fd;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return fd;
}

int FastLaneClient::Hello(int fd) {
  std::string hello;
  {
    // A ticket is good once: a second connection made meanwhile waits for
    // the next one, using gRPC in between.
    MutexLock lock(&mu_);
    if (ticket_.empty()) return -EAGAIN;
    hello.swap(ticket_);
  }
  hello += token_;
  Status s = WriteFrame(fd, fastlane::kHello, hello);
  uint8_t code = 0;
  std::string next;
  if (s.ok()) s = ReadFrame(fd, &code, &next, fastlane::kMaxHello);
  if (!s.ok()) return -s.errnum();
  if (code != fastlane::kReplyOk) return -EACCES;
  MutexLock lock(&mu_);
  if (ticket_.empty()) ticket_ = std::move(next);
  return 0;
}

void FastLaneClient::Checkin(int fd) {
  MutexLock lock(&mu_);
  idle_.push_back(fd);
}

int FastLaneClient::Call(uint8_t op, const google::protobuf::MessageLite &req,
                         google::protobuf::MessageLite *rep) {
  int fd = Checkout();
  if (fd < 0) return fd;
  std::string payload;
  req.SerializeToString(&payload);
  Status s = WriteFrame(fd, op, payload);
  uint8_t code = 0;
  if (s.ok()) s = ReadFrame(fd, &code, &payload, fastlane::kMaxPayload);
  if (!s.ok()) {
    close(fd);
    int err = s.errnum();
    return err == EAGAIN || err == EWOULDBLOCK ? -ETIMEDOUT : -err;
  }
  if (code != fastlane::kReplyOk || !rep->ParseFromString(payload)) {
    close(fd);
    return -EPROTO;
  }
  Checkin(fd);
  return 0;
}

}  // namespace maru
