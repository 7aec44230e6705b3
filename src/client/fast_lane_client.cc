#include "client/fast_lane_client.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "proto/fast_lane.h"
#include "util/frame.h"

namespace maru {

FastLaneClient::FastLaneClient(std::string path, int64_t timeout_ms)
    : path_(std::move(path)), timeout_ms_(timeout_ms) {}

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
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) < 0) {
    int err = errno;
    close(fd);
    return -err;
  }
  // A server that stops answering must not hang the caller.
  timeval tv{timeout_ms_ / 1000, static_cast<suseconds_t>((timeout_ms_ % 1000) * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return fd;
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
