#include "meta/identity.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

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
  c.via_trusted_daemon = true;
  return c;
}

// Equal, in a time that does not depend on where the strings differ: a
// caller guessing a token byte by byte learns nothing from the clock.
bool SameSecret(const std::string &a, const std::string &b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i)
    diff |= static_cast<unsigned char>((i < a.size() ? a[i] : 0) ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
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
  // The kernel's own list, taken at connect time: /proc/PID/status could
  // belong to another process by now (the peer exited, its pid reused).
  std::vector<gid_t> groups(32);
  for (;;) {
    socklen_t size = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &size) == 0) {
      groups.resize(size / sizeof(gid_t));
      break;
    }
    // ERANGE: the list is longer; the kernel said how long in `size`.
    if (errno != ERANGE) return std::nullopt;
    groups.resize(std::max<size_t>(size / sizeof(gid_t), groups.size() * 2));
  }
  out.groups.assign(groups.begin(), groups.end());
  return out;
}

Result<Peer> IdentifyTcp(const TcpProof &proof, const IdentityPolicy &policy) {
  if (proof.token) {
    // Every token is compared, to the end: no early exit says how close.
    const MappedId *found = nullptr;
    for (const auto &[token, id] : policy.tokens)
      if (SameSecret(*proof.token, token)) found = &id;
    if (!found) return Status::Error(EACCES, "token refused");
    return Peer::TcpAuthenticated(found->uid, found->gid);
  }
  for (const std::string &name : proof.cert_names) {
    auto it = policy.certs.find(name);
    if (it != policy.certs.end()) return Peer::TcpAuthenticated(it->second.uid, it->second.gid);
  }
  return Peer::Tcp();
}

Authenticated Authenticate(const Peer &peer, const IdentityPolicy &) {
  Authenticated a;
  switch (peer.kind()) {
    case Peer::Kind::kUnix:
    case Peer::Kind::kTcpAuthenticated:
      a.caller = FromCredentials(peer.creds());
      // A root daemon (maru-fuse, or a gateway holding a root certificate
      // or token) speaks for its callers.
      a.may_assert = peer.creds().uid == 0;
      break;
    case Peer::Kind::kTcp:
      // Nothing proves who it is, so nothing it asserts counts.
      a.caller.uid = a.caller.gid = kNobody;
      a.may_assert = false;
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
  MutexLock lock(&mu_);
  by_fd_[fd] = creds;
}

Peer PeerRegistry::Identify(const std::string &grpc_peer) const {
  if (grpc_peer.rfind("fd:", 0) != 0) return Peer::Tcp();
  int fd = atoi(grpc_peer.c_str() + 3);
  MutexLock lock(&mu_);
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return Peer::UnknownUnix();
  return Peer::Unix(it->second);
}

Result<Peer> PeerRegistry::Identify(const std::string &grpc_peer, const TcpProof &proof,
                                    const IdentityPolicy &policy) const {
  if (grpc_peer.rfind("fd:", 0) == 0) return Identify(grpc_peer);
  return IdentifyTcp(proof, policy);
}

}  // namespace maru
