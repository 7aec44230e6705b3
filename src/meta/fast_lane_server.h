// The server side of the fast lane (src/proto/fast_lane.h): a Unix socket
// beside the gRPC one, a thread per connection, the same engine calls and
// the same identity rules (meta/identity.h) as MetaService. The operations
// served, and their stats, come from src/proto/fast_lane_ops.inc.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ha/leader_gate.h"
#include "meta/acceptor.h"
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
  ~FastLaneServer();

  Status Bind();
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

  struct Connection {
    int fd;
    Peer peer;
    std::thread thread;
  };
  void Accept(int fd);
  void Serve(Connection *conn);
  // Runs one request; false if it could not be parsed.
  bool Dispatch(const Peer &peer, uint8_t op, const std::string &in, std::string *out);
  // Parses a request, runs it on the engine as its caller, serializes the reply.
  template <typename Req, typename Rep>
  bool RunOne(void (MetaEngine::*op)(const Caller &, const Req &, Rep *), const Peer &peer,
              const std::string &in, std::string *out, int *error);

  std::string path_;
  size_t max_connections_;
  MetaEngine *engine_;
  IdentityPolicy policy_;
  CpuWakeLatency *wake_;
  const LeaderGate *gate_ = nullptr;
  int slots_[fastlane::kOpLimit] = {};  // op -> OpStats slot
  std::unique_ptr<Acceptor> acceptor_;
  Mutex mu_;
  std::vector<std::unique_ptr<Connection>> connections_ GUARDED_BY(mu_);
};

}  // namespace maru
