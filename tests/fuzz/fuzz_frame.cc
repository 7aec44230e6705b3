// Fast-lane framing on arbitrary bytes from a peer: frames are read until
// the stream ends or breaks, and nothing past the limit is ever accepted.
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "util/frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace maru;
  constexpr uint32_t kMax = 1 << 16;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 0;
  int buf = 1 << 20;
  setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  size_t off = 0;
  while (off < size) {
    ssize_t n = write(sv[0], data + off, size - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  close(sv[0]);
  uint8_t code;
  std::string payload;
  size_t consumed = 0;
  for (;;) {
    Status s = ReadFrame(sv[1], &code, &payload, kMax);
    if (!s.ok()) break;
    if (payload.size() > kMax) __builtin_trap();
    consumed += 5 + payload.size();
    if (consumed > off) __builtin_trap();
  }
  close(sv[1]);
  return 0;
}
