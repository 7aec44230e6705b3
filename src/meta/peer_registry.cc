#include "meta/peer_registry.h"

#include <sys/socket.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace maru {

void PeerRegistry::Set(int fd, const PeerCredentials &creds) {
  std::lock_guard<std::mutex> lock(mu_);
  by_fd_[fd] = creds;
}

std::optional<PeerCredentials> PeerRegistry::Lookup(const std::string &peer) const {
  if (peer.rfind("fd:", 0) != 0) return std::nullopt;
  int fd = atoi(peer.c_str() + 3);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return std::nullopt;
  return it->second;
}

std::optional<PeerCredentials> ReadPeerCredentials(int fd) {
  ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) return std::nullopt;
  PeerCredentials out;
  out.pid = cred.pid;
  out.uid = cred.uid;
  out.gid = cred.gid;
  std::ifstream status("/proc/" + std::to_string(cred.pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Groups:", 0) != 0) continue;
    std::istringstream in(line.substr(7));
    uint32_t g;
    while (in >> g) out.groups.push_back(g);
    break;
  }
  return out;
}

}  // namespace maru
