// Who is at the other end of each Unix-socket connection. maru-server
// accepts Unix connections itself, reads SO_PEERCRED, and hands the socket
// to gRPC; gRPC names such a peer "fd:N", which this registry maps back to
// the credentials read at accept time.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace maru {

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<uint32_t> groups;  // supplementary groups, from /proc/PID/status
};

class PeerRegistry {
 public:
  void Set(int fd, const PeerCredentials &creds);
  // Credentials for a gRPC peer string, if it names a Unix connection.
  std::optional<PeerCredentials> Lookup(const std::string &peer) const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<int, PeerCredentials> by_fd_;
};

// Reads SO_PEERCRED (and the supplementary groups) of a connected socket.
std::optional<PeerCredentials> ReadPeerCredentials(int fd);

}  // namespace maru
