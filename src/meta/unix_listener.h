// Listens on a Unix socket for maru-server: accepts each connection, records
// its peer credentials, and gives the socket to the gRPC server.
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include "meta/peer_registry.h"
#include "util/status.h"

namespace grpc {
class Server;
}

namespace maru {

class UnixListener {
 public:
  UnixListener(std::string path, PeerRegistry *peers) : path_(std::move(path)), peers_(peers) {}
  ~UnixListener();

  // Binds the socket (creating its directory; replacing a stale socket but
  // never one a live server answers on) and makes it connectable by all
  // users: permissions are checked per operation, not per connection.
  Status Bind();
  // Accepts connections on a thread until Stop().
  void Start(grpc::Server *server);
  void Stop();

 private:
  void AcceptLoop();

  std::string path_;
  PeerRegistry *peers_;
  grpc::Server *server_ = nullptr;
  int fd_ = -1;
  int wake_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace maru
