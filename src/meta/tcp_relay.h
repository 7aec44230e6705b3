// TcpRelay: one TCP listener of maru-server.
//
// gRPC 1.51 takes every TCP connection it can accept, with no cap, and
// once an accept fails for want of descriptors it never accepts on that
// port again (a flood of idle connections closed it for good, for plain,
// TLS and token callers alike). So the server accepts TCP itself (an
// Acceptor, which waits out a shortage), admits each connection through
// the ConnectionGate (per listener, per peer address, and a descriptor
// budget that leaves the Unix socket its share and gRPC its accepts), and
// carries its bytes to and from a gRPC listener on a Unix socket in a
// directory only the server may enter, which holds the TCP credentials
// (TLS, tokens) as the port did. TLS runs end to end through the relay;
// gRPC sees a peer that is not a Unix one ("fd:N"), so the TCP rules of
// identity.h apply unchanged.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "meta/acceptor.h"
#include "meta/connection_gate.h"
#include "util/mutex.h"
#include "util/status.h"

namespace maru {

class TcpRelay {
 public:
  // Listens on HOST:PORT, relaying to the Unix socket `target`.
  static Result<std::unique_ptr<TcpRelay>> Listen(const std::string &host_port, std::string target,
                                                  ConnectionGate *gate);
  ~TcpRelay();

  void Start();
  // Stops accepting and ends every connection.
  void Stop();
  const std::string &name() const { return acceptor_->name(); }

  // A connection that moves no byte either way for this long is closed
  // (clients heartbeat every few seconds, and reconnect).
  static constexpr int kIdleSeconds = 600;

 private:
  TcpRelay(std::unique_ptr<Acceptor> acceptor, std::string target, ConnectionGate *gate);
  struct Connection {
    int fd = -1;       // the client's
    int up = -1;       // to gRPC
    std::string peer;  // the client's address, for the gate
    std::thread thread;
    std::atomic<bool> done{false};
  };
  void Accept(int fd);
  void Serve(Connection *c);
  // Joins the threads of connections that ended.
  void Reap() REQUIRES(mu_);

  std::unique_ptr<Acceptor> acceptor_;
  const std::string target_;
  ConnectionGate *gate_;
  const int id_;  // the listener, for the gate
  Mutex mu_;
  std::vector<std::unique_ptr<Connection>> connections_ GUARDED_BY(mu_);
  int64_t last_refusal_log_ns_ GUARDED_BY(mu_) = 0;
};

}  // namespace maru
