// The server side of the fast lane (src/proto/fast_lane.h): a Unix socket
// beside the gRPC one, a thread per connection, the same engine calls and
// the same identity rules (meta/identity.h) as MetaService. The operations
// served, and their stats, come from src/proto/fast_lane_ops.inc.
//
// Over TCP the kernel cannot say who is calling: a connection is admitted
// by the ConnectionGate (as the TCP relays are), then presents a ticket
// (meta/fast_lane_tickets.h) and is from then on the ticket's uid, for the
// ticket's session only.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ha/leader_gate.h"
#include "meta/acceptor.h"
#include "meta/connection_gate.h"
#include "meta/fast_lane_tickets.h"
#include "meta/identity.h"
#include "meta/meta_engine.h"
#include "proto/fast_lane.h"
#include "util/cpu_wake_latency.h"
#include "util/mutex.h"

namespace maru {

struct FastLaneFuzzer;

class FastLaneServer {
 public:
  // At most `max_connections` connections at once (past them, new ones are
  // refused and clients use gRPC), and never more than kMaxConnections.
  // `wake` (may be null) is told of every request, so that idle CPUs are
  // kept quick to wake while requests come (util/cpu_wake_latency.h).
  FastLaneServer(std::string path, MetaEngine *engine, IdentityPolicy policy,
                 size_t max_connections = kMaxConnections, CpuWakeLatency *wake = nullptr);
  // Over TCP, on HOST:PORT (port 0: one the kernel picks).
  struct TcpDoor {
    ConnectionGate *gate = nullptr;
    FastLaneTickets *tickets = nullptr;
  };
  FastLaneServer(std::string host_port, MetaEngine *engine, IdentityPolicy policy, TcpDoor door,
                 size_t max_connections, CpuWakeLatency *wake);
  ~FastLaneServer();

  Status Bind();
  // The TCP port bound (after Bind()); 0 for a Unix socket.
  int port() const { return acceptor_ ? acceptor_->port() : 0; }
  void Start();
  void Stop();
  const std::string &path() const { return path_; }
  // With a gate, a server that does not lead closes each connection at its
  // next request: the client falls back to gRPC, which names the leader.
  void set_leader_gate(const LeaderGate *gate) { gate_ = gate; }

 private:
  friend struct FastLaneFuzzer;  // tests/fuzz/fuzz_fastlane.cc drives Dispatch()

  // Bounds on what clients can hold: past the first, new connections are
  // refused (clients then use gRPC); an idle one is closed after the second.
  static constexpr size_t kMaxConnections = 1024;
  static constexpr int kIdleTimeoutSeconds = 600;
  // A TCP connection that has not presented its ticket by then is closed.
  static constexpr int kHelloTimeoutSeconds = 10;
  static constexpr int kTcpListener = -1;  // this door's id at the gate

  struct Connection {
    int fd;
    Peer peer;
    std::thread thread;
    std::string address;   // TCP: the peer's, for the gate
    uint64_t session = 0;  // TCP: the only session its requests may name
  };
  void Accept(int fd);
  // The connection's Peer from a TCP socket, or false (closed).
  std::optional<Peer> AcceptTcp(int fd, std::string *address);
  void Serve(Connection *conn);
  // Closes a connection whose thread is ending, and gives back its place.
  void End(Connection *conn);
  // Reads and checks a TCP connection's ticket, answers with the next one;
  // false if it is refused.
  bool Hello(Connection *conn);
  // Runs one request; false if it could not be parsed, or names a session
  // other than `session` (when not 0).
  bool Dispatch(const Peer &peer, uint8_t op, const std::string &in, std::string *out,
                uint64_t session = 0);
  // Parses a request, runs it on the engine as its caller, serializes the reply.
  template <typename Req, typename Rep>
  bool RunOne(void (MetaEngine::*op)(const Caller &, const Req &, Rep *), const Peer &peer,
              const std::string &in, uint64_t session, std::string *out, int *error);

  std::string path_;
  size_t max_connections_;
  MetaEngine *engine_;
  IdentityPolicy policy_;
  CpuWakeLatency *wake_;
  const LeaderGate *gate_ = nullptr;
  TcpDoor door_;
  int slots_[fastlane::kOpLimit] = {};  // op -> OpStats slot
  // TCP: requests served, and hellos (refused ones count as errors).
  int tcp_slot_ = -1, hello_slot_ = -1;
  std::unique_ptr<Acceptor> acceptor_;
  Mutex mu_;
  std::vector<std::unique_ptr<Connection>> connections_ GUARDED_BY(mu_);
};

}  // namespace maru
