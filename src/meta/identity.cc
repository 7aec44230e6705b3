#include "meta/identity.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace maru {
namespace {

Caller FromCredentials(const PeerCredentials &creds) {
  Caller c;
  c.uid = creds.uid;
  c.gid = creds.gid;
  c.groups = creds.groups;
  c.pid = static_cast<uint32_t>(creds.pid);
  return c;
}

Caller FromAssertion(const rpc::Caller &asserted) {
  Caller c;
  c.uid = asserted.uid();
  c.gid = asserted.gid();
  c.groups.assign(asserted.groups().begin(), asserted.groups().end());
  c.pid = asserted.pid();
  return c;
}

}  // namespace

bool Caller::InGroup(uint32_t g) const {
  return g == gid || std::find(groups.begin(), groups.end(), g) != groups.end();
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

Authenticated Authenticate(const Peer &peer, const IdentityPolicy &policy) {
  Authenticated a;
  switch (peer.kind()) {
    case Peer::Kind::kUnix:
      a.caller = FromCredentials(peer.creds());
      a.may_assert = peer.creds().uid == 0;  // a root daemon (maru-fuse) speaks for its callers
      break;
    case Peer::Kind::kTcp:
      if (policy.tcp == IdentityPolicy::Tcp::kSquash) {
        a.caller.uid = a.caller.gid = kNobody;
        a.may_assert = false;
      } else {
        a.caller.uid = a.caller.gid = 0;
        a.may_assert = true;
      }
      break;
  }
  return a;
}

Caller ResolveCaller(const Peer &peer, const rpc::Header &header, const IdentityPolicy &policy) {
  Authenticated a = Authenticate(peer, policy);
  if (a.may_assert && header.caller().set()) return FromAssertion(header.caller());
  return a.caller;
}

void PeerRegistry::Set(int fd, const PeerCredentials &creds) {
  std::lock_guard<std::mutex> lock(mu_);
  by_fd_[fd] = creds;
}

Peer PeerRegistry::Identify(const std::string &grpc_peer) const {
  if (grpc_peer.rfind("fd:", 0) != 0) return Peer::Tcp();
  int fd = atoi(grpc_peer.c_str() + 3);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return Peer::UnknownUnix();
  return Peer::Unix(it->second);
}

}  // namespace maru
