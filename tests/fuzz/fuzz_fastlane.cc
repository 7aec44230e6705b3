// The fast lane's server side on arbitrary bytes from a peer: the input is
// a byte choosing who the peer is, then the stream it sends. The stream is
// cut into frames by the real framing code (ReadFrame, over a socket pair,
// as FastLaneServer::Serve reads it) and each frame goes to
// FastLaneServer::Dispatch on a real MetaEngine, until one does not parse
// (the server would then drop the connection). Peers are Unix callers
// (root, an ordinary uid, nobody) and TCP ones, authenticated as root or not; a
// request naming no session gets its peer's live one, so requests get past
// the session check and into the operations.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "fast_lane.h"
#include "fuzz_engine_fixture.h"
#include "meta/fast_lane_server.h"
#include "util/frame.h"

namespace maru {

// The friend of FastLaneServer that reaches its dispatch.
struct FastLaneFuzzer {
  static bool Dispatch(FastLaneServer *server, const Peer &peer, uint8_t op, const std::string &in,
                       std::string *out) {
    return server->Dispatch(peer, op, in, out);
  }
};

}  // namespace maru

namespace {

using namespace maru;

struct Fixture : fuzz::EngineFixture {
  std::unique_ptr<FastLaneServer> server;
};

Fixture *fixture = nullptr;

void Cleanup() {
  if (!fixture) return;
  fixture->server.reset();
  fuzz::CloseEngine(fixture);
}

// Every request's field 1 is its Header: a request without a session gets
// the peer's own. Anything that does not parse as that goes through as is.
std::string WithSession(const std::string &payload, int who) {
  rpc::HeartbeatRequest head;  // only a Header; the rest stays unknown fields
  if (!head.ParseFromString(payload) || head.header().session() != 0) return payload;
  head.mutable_header()->set_session(fixture->sessions[who]);
  std::string out;
  head.SerializeToString(&out);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  fixture = new Fixture;
  fuzz::OpenEngine("fastlane", fixture);
  // Never bound: Dispatch() needs no socket.
  fixture->server = std::make_unique<FastLaneServer>(fixture->dir + "/fast", fixture->engine.get(),
                                                     IdentityPolicy{});
  atexit(Cleanup);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  // Who sends: bits 0-1 pick root, uid 1000, nobody (over Unix) or a TCP
  // peer; bit 2 makes the TCP peer one authenticated as root (it may
  // assert), else it proved nothing and is nobody.
  const int kind = data[0] & 3;
  const bool tcp_root = data[0] & 4;
  const int who = kind == 3 ? (tcp_root ? 0 : 2) : kind;
  const Peer peer = kind != 3
                        ? Peer::Unix(PeerCredentials{1, fuzz::kUids[who], fuzz::kUids[who], {}})
                    : tcp_root ? Peer::TcpAuthenticated(0, 0)
                               : Peer::Tcp();
  FastLaneServer *server = fixture->server.get();
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 0;
  int buf = 1 << 20;
  setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  fcntl(sv[0], F_SETFL, O_NONBLOCK);  // a stream longer than the buffer is cut
  for (size_t off = 1; off < size;) {
    ssize_t n = write(sv[0], data + off, size - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  close(sv[0]);
  uint8_t op;
  std::string in, out;
  while (ReadFrame(sv[1], &op, &in, fastlane::kMaxPayload).ok()) {
    out.clear();
    if (!FastLaneFuzzer::Dispatch(server, peer, op, WithSession(in, who), &out)) break;
  }
  close(sv[1]);
  fixture->engine->Tick();
  return 0;
}
