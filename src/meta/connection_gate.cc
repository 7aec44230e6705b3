#include "meta/connection_gate.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>

#include "util/clock.h"

namespace maru {

std::string TcpPeerAddress(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr *>(&addr), &len) != 0) return "";
  char text[INET6_ADDRSTRLEN] = "";
  if (addr.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in *>(&addr)->sin_addr, text, sizeof(text));
  else if (addr.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6 *>(&addr)->sin6_addr, text, sizeof(text));
  return text;
}

ConnectionGate::ConnectionGate(uint64_t descriptors, Limits limits) : limits_(limits) {
  reserve_ = std::max<uint64_t>(64, descriptors / 8);
  const uint64_t shared = descriptors > reserve_ ? descriptors - reserve_ : 0;
  auto cap = [](uint64_t n) { return static_cast<uint32_t>(std::min<uint64_t>(n, UINT32_MAX)); };
  tcp_max_ = cap(shared / 2 / kTcpCost);
  unix_max_ = cap(shared / 4);
  fast_lane_ = cap(std::min<uint64_t>(shared / 4, 1024));
}

bool ConnectionGate::AdmitTcp(int listener, const std::string &peer) {
  MutexLock lock(&mu_);
  uint32_t &on_listener = per_listener_[listener];
  uint32_t &from_peer = per_peer_[peer];
  const bool room = tcp_ < tcp_max_ &&
                    (!limits_.tcp_per_listener || on_listener < limits_.tcp_per_listener) &&
                    (!limits_.tcp_per_peer || from_peer < limits_.tcp_per_peer);
  if (!room) {
    if (from_peer == 0) per_peer_.erase(peer);  // a refused peer leaves nothing behind
    return false;
  }
  ++tcp_;
  ++on_listener;
  ++from_peer;
  return true;
}

void ConnectionGate::LeaveTcp(int listener, const std::string &peer) {
  MutexLock lock(&mu_);
  --tcp_;
  --per_listener_[listener];
  if (auto it = per_peer_.find(peer); it != per_peer_.end() && --it->second == 0)
    per_peer_.erase(it);
}

bool ConnectionGate::AdmitUnix(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return false;
  MutexLock lock(&mu_);
  unix_.erase(fd);  // the number was another socket's, which gRPC closed
  if (unix_.size() >= unix_max_) Reap();
  if (unix_.size() >= unix_max_) return false;
  unix_[fd] = Socket{st.st_dev, st.st_ino};
  return true;
}

void ConnectionGate::Reap() {
  const int64_t now = MonotonicNs();
  if (now - last_reap_ns_ < 50'000'000) return;
  last_reap_ns_ = now;
  std::erase_if(unix_, [](const auto &entry) {
    struct stat st;
    return fstat(entry.first, &st) != 0 || st.st_dev != entry.second.dev ||
           st.st_ino != entry.second.ino;
  });
}

}  // namespace maru
