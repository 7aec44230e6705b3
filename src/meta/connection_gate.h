// ConnectionGate: how many connections maru-server takes, and from whom,
// so that no client, local or remote, can take the descriptors the others
// and the server itself need (docs/security.md, "Resource limits").
//
// The process's descriptors (RLIMIT_NOFILE) are split: a reserve that no
// connection may take (RocksDB's files, the TCP relay's own connections to
// gRPC, the metrics port), half of the rest for TCP, a quarter for the
// gRPC Unix socket and a quarter for the fast lane. So a flood of TCP
// connections leaves the Unix socket its share, and no flood can make an
// accept of gRPC's fail (gRPC 1.51 then stops listening on that socket for
// good). Within TCP's half, a listener takes at most `tcp_per_listener`
// connections and one peer address at most `tcp_per_peer`.
//
// A TCP connection is the relay's (TcpRelay): it says when it ends. A Unix
// connection is handed to gRPC, which closes it unseen: the gate notes the
// socket's inode, and finds the ones gone when it runs short.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>

#include "util/mutex.h"

namespace maru {

// The address of a TCP socket's peer without its port: what one peer is,
// for the gate ("" if unknown).
std::string TcpPeerAddress(int fd);

class ConnectionGate {
 public:
  struct Limits {
    uint32_t tcp_per_listener = 1024;
    uint32_t tcp_per_peer = 64;
  };
  // Each TCP connection is three descriptors: the client's socket, the
  // relay's to gRPC, and gRPC's end of that.
  static constexpr uint32_t kTcpCost = 3;

  // `descriptors`: the process's limit on open descriptors.
  ConnectionGate(uint64_t descriptors, Limits limits);

  // A place for a TCP connection from `peer` (its address, without the
  // port) on listener `listener`; false if a cap says no. Leave() gives it
  // back.
  bool AdmitTcp(int listener, const std::string &peer);
  void LeaveTcp(int listener, const std::string &peer);

  // A place for the Unix connection `fd`, handed to gRPC from now on;
  // false if none is left (after finding those gRPC closed).
  bool AdmitUnix(int fd);

  // Connections the fast lane may hold at once (its descriptors' share).
  uint32_t fast_lane_connections() const { return fast_lane_; }
  uint32_t tcp_connections() const { return tcp_max_; }
  uint64_t reserve() const { return reserve_; }

 private:
  // Forgets the handed Unix sockets gRPC has closed (their descriptor now
  // names another file, or none): at most every 50 ms, as it costs a
  // system call each.
  void Reap() REQUIRES(mu_);

  const Limits limits_;
  uint64_t reserve_ = 0;
  uint32_t tcp_max_ = 0, unix_max_ = 0, fast_lane_ = 0;
  Mutex mu_;
  uint32_t tcp_ GUARDED_BY(mu_) = 0;
  std::unordered_map<int, uint32_t> per_listener_ GUARDED_BY(mu_);
  std::unordered_map<std::string, uint32_t> per_peer_ GUARDED_BY(mu_);
  struct Socket {
    dev_t dev;
    ino_t ino;
  };
  std::unordered_map<int, Socket> unix_ GUARDED_BY(mu_);  // handed descriptor -> what it was
  int64_t last_reap_ns_ GUARDED_BY(mu_) = 0;
};

}  // namespace maru
