#include "fs/fuse_init.h"

#include <fcntl.h>
#include <linux/fuse.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>

namespace maru {
namespace {

// The init flags that an INIT request offers (flags2 as bits 32..); 0 if
// `buf` is not a 7.x INIT.
uint64_t OfferedFlags(const fuse_buf &buf) {
  if (buf.flags & FUSE_BUF_IS_FD) return 0;
  if (buf.size < sizeof(fuse_in_header) + offsetof(fuse_init_in, flags2) + sizeof(uint32_t))
    return 0;
  const auto *in = static_cast<const fuse_in_header *>(buf.mem);
  const auto *arg = reinterpret_cast<const fuse_init_in *>(in + 1);
  if (in->opcode != FUSE_INIT || arg->major != 7) return 0;
  const uint64_t high = (arg->flags & FUSE_INIT_EXT) ? static_cast<uint64_t>(arg->flags2) << 32 : 0;
  return high | arg->flags;
}

// Adds `flags` (flags2 as bits 32..) to a successful INIT reply of `len`
// bytes.
bool AddFlags(char *reply, size_t len, uint64_t flags) {
  if (len < sizeof(fuse_out_header) + offsetof(fuse_init_out, flags2) + sizeof(uint32_t))
    return false;
  auto *out = reinterpret_cast<fuse_out_header *>(reply);
  auto *arg = reinterpret_cast<fuse_init_out *>(out + 1);
  if (out->error != 0 || out->len != len || arg->major != 7) return false;
  arg->flags |= static_cast<uint32_t>(flags);
  if (flags >> 32) {
    arg->flags |= FUSE_INIT_EXT;
    arg->flags2 |= static_cast<uint32_t>(flags >> 32);
  }
  return true;
}

// libfuse's reply to `buf`, written into a pipe that stands in for the
// device during the call; its length, or a negative errno.
ssize_t ReplyOf(fuse_session *se, const fuse_buf &buf, char *reply, size_t room) {
  const int dev = fuse_session_fd(se);
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) < 0) return -errno;
  const int saved = fcntl(dev, F_DUPFD_CLOEXEC, 0);
  if (saved < 0 || dup3(pipefd[1], dev, O_CLOEXEC) < 0) {
    const int err = errno;
    if (saved >= 0) close(saved);
    close(pipefd[0]);
    close(pipefd[1]);
    return -err;
  }
  fuse_session_process_buf(se, &buf);
  // The device is back before anything else can fail: the session needs it.
  const int restored = dup3(saved, dev, O_CLOEXEC);
  const int err = errno;
  close(saved);
  close(pipefd[1]);
  // One writev of a small reply into an empty pipe: all of it, or nothing.
  ssize_t got = restored < 0 ? -err : read(pipefd[0], reply, room);
  if (got < 0 && restored >= 0) got = -errno;
  close(pipefd[0]);
  return got;
}

}  // namespace

int64_t AnswerInit(fuse_session *se, uint64_t extra) {
  fuse_buf buf{};
  int n;
  do {
    n = fuse_session_receive_buf(se, &buf);
  } while (n == -EINTR);
  if (n <= 0) {
    free(buf.mem);
    return n < 0 ? n : -ENODEV;
  }
  buf.size = static_cast<size_t>(n);
  // Only what the kernel offered; FUSE_INIT_EXT is the reply's framing
  // (AddFlags sets it where flags2 is used), not a capability.
  const uint64_t wanted = extra & OfferedFlags(buf) & ~static_cast<uint64_t>(FUSE_INIT_EXT);
  if (!wanted) {  // nothing to add: libfuse answers as it would anyway
    fuse_session_process_buf(se, &buf);
    free(buf.mem);
    return 0;
  }
  char reply[4096];
  ssize_t len = ReplyOf(se, buf, reply, sizeof(reply));
  free(buf.mem);
  if (len < 0) {
    fuse_session_exit(se);
    return len;
  }
  const bool added = AddFlags(reply, static_cast<size_t>(len), wanted);
  if (write(fuse_session_fd(se), reply, static_cast<size_t>(len)) != len) {
    const int err = errno ? errno : EIO;
    fuse_session_exit(se);
    return -err;
  }
  return added ? static_cast<int64_t>(wanted) : 0;
}

}  // namespace maru
