#include "util/frame.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace maru {
namespace {

constexpr size_t kFrameReadStep = 64 << 10;

Status ReadExactly(int fd, void *buf, size_t len) {
  auto *p = static_cast<uint8_t *>(buf);
  while (len > 0) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Error(errno);
    if (n == 0) return Status::Error(ECONNRESET, "end of stream");
    p += n;
    len -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace

Status WriteFrame(int fd, uint8_t code, const std::string &payload) {
  uint8_t header[5];
  const uint32_t len = static_cast<uint32_t>(payload.size());
  memcpy(header, &len, 4);
  header[4] = code;
  iovec iov[2] = {{header, sizeof(header)}, {const_cast<char *>(payload.data()), payload.size()}};
  size_t left = sizeof(header) + payload.size();
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  while (left > 0) {
    ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Error(errno);
    left -= static_cast<size_t>(n);
    // Skip what went out, for the rare short write.
    while (n > 0 && msg.msg_iovlen > 0) {
      size_t take = std::min(static_cast<size_t>(n), msg.msg_iov[0].iov_len);
      msg.msg_iov[0].iov_base = static_cast<uint8_t *>(msg.msg_iov[0].iov_base) + take;
      msg.msg_iov[0].iov_len -= take;
      n -= static_cast<ssize_t>(take);
      if (msg.msg_iov[0].iov_len == 0) {
        ++msg.msg_iov;
        --msg.msg_iovlen;
      }
    }
  }
  return Status::Ok();
}

Status ReadFrame(int fd, uint8_t *code, std::string *payload, uint32_t max) {
  uint8_t header[5];
  MARU_RETURN_IF_ERROR(ReadExactly(fd, header, sizeof(header)));
  uint32_t len;
  memcpy(&len, header, 4);
  if (len > max) return Status::Error(EMSGSIZE, "frame too large");
  *code = header[4];
  // Grow with the bytes that actually arrive: a header alone must not make
  // the reader allocate the length it announces (a peer could announce
  // 16 MiB on each of many idle connections).
  payload->clear();
  while (payload->size() < len) {
    const size_t have = payload->size();
    const size_t step = std::min<size_t>(len - have, kFrameReadStep);
    payload->resize(have + step);
    Status s = ReadExactly(fd, payload->data() + have, step);
    if (!s.ok()) {
      payload->clear();
      payload->shrink_to_fit();
      return s;
    }
  }
  return Status::Ok();
}

}  // namespace maru
