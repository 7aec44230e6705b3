// A listening socket and the thread that accepts on it, for the three
// listeners of maru-server (gRPC's Unix socket, the fast lane, /metrics).
// Stop() wakes the thread and closes the socket (removing a Unix one).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "util/status.h"

namespace maru {

class Acceptor {
 public:
  // Binds a Unix socket connectable by all users (permissions are checked
  // per operation): creates its directory, replaces a stale socket, but
  // never one that a live server answers on.
  static Result<std::unique_ptr<Acceptor>> ListenUnix(const std::string &path);
  // Binds HOST:PORT.
  static Result<std::unique_ptr<Acceptor>> ListenTcp(const std::string &host_port);
  ~Acceptor();

  // Calls `on_connection` with each accepted socket (close-on-exec, and
  // non-blocking if asked), on a thread of its own, until Stop().
  void Start(std::function<void(int fd)> on_connection, bool nonblocking = false);
  void Stop();
  const std::string &name() const { return name_; }
  // The TCP port bound (the one the kernel chose for port 0); 0 for Unix.
  int port() const;

 private:
  Acceptor() = default;
  Status Prepare(int fd, const std::string &name);
  void Loop(const std::function<void(int)> &on_connection, bool nonblocking);

  std::string name_;
  std::string unix_path_;  // removed at Stop()
  int fd_ = -1;
  int wake_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace maru
