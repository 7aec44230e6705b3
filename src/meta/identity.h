// Who is asking: the one place that turns a connection and a request header
// into the Caller that permissions are checked against. Both doors of the
// server (MetaService over gRPC, FastLaneServer) resolve callers here; this
// is the security boundary, so every rule lives in this unit:
//
//   1. What the transport proves about the other end (a Peer):
//      - a Unix peer: the kernel's SO_PEERCRED (pid, uid, gid) and the
//        supplementary groups of that pid, read once at accept time;
//      - a Unix peer whose credentials went missing: nobody;
//      - a TCP peer: nothing (the kernel cannot tell who it is).
//   2. Whom that peer may speak for (Authenticate):
//      - root over Unix (maru-fuse, a root daemon) acts for its callers: it
//        may assert their identity in the request header;
//      - any other Unix peer is itself, whatever its header says;
//      - a TCP peer is trusted to assert (as NFS AUTH_SYS is) and is root
//        when it asserts nothing; with --tcp-squash it is nobody, always.
//   3. The header's assertion replaces the peer's identity (uid, gid,
//      groups, pid) only for a peer allowed to make it.
//
// Changing a rule is a change here: unauthenticated TCP callers become
// nobody by default when IdentityPolicy's default does; an authenticated
// TCP caller (TLS, a token) is a new Peer::Kind made by
// PeerRegistry::Identify (from the call's auth context) and a case in
// Authenticate().
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "maru.pb.h"

namespace maru {

constexpr uint32_t kNobody = 65534;

// The identity permissions are checked against.
struct Caller {
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;
  uint32_t pid = 0;

  bool is_root() const { return uid == 0; }
  bool InGroup(uint32_t g) const;
};

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<uint32_t> groups;  // supplementary groups, from /proc/PID/status
};

// Reads SO_PEERCRED (and the supplementary groups) of a connected socket.
std::optional<PeerCredentials> ReadPeerCredentials(int fd);

// What the transport proves about the other end of a connection.
// Made only by the factories, so that no peer is trusted by default.
class Peer {
 public:
  enum class Kind {
    kUnix,  // creds() are the kernel's word
    kTcp,   // nothing is known
  };

  static Peer Unix(PeerCredentials creds) { return Peer(Kind::kUnix, std::move(creds)); }
  static Peer Tcp() { return Peer(Kind::kTcp, {}); }
  // A Unix connection whose credentials are unknown speaks for nobody.
  static Peer UnknownUnix() { return Unix(PeerCredentials{0, kNobody, kNobody, {}}); }

  Kind kind() const { return kind_; }
  const PeerCredentials &creds() const { return creds_; }  // kUnix only

 private:
  Peer(Kind kind, PeerCredentials creds) : kind_(kind), creds_(std::move(creds)) {}

  Kind kind_;
  PeerCredentials creds_;
};

struct IdentityPolicy {
  enum class Tcp {
    kTrustAsserted,  // the asserted identity, root if none (the default)
    kSquash,         // nobody (--tcp-squash)
  };
  Tcp tcp = Tcp::kTrustAsserted;

  static IdentityPolicy WithTcpSquash(bool squash) {
    return IdentityPolicy{squash ? Tcp::kSquash : Tcp::kTrustAsserted};
  }
};

// Who the peer is and whether it may speak for someone else.
struct Authenticated {
  Caller caller;
  bool may_assert = false;
};
Authenticated Authenticate(const Peer &peer, const IdentityPolicy &policy);

// Who is asking: the peer, or whom it asserts in `header` if it may.
Caller ResolveCaller(const Peer &peer, const rpc::Header &header, const IdentityPolicy &policy);

// Who is at the other end of each Unix connection gRPC serves. maru-server
// accepts Unix connections itself, reads SO_PEERCRED, and hands the socket
// to gRPC; gRPC names such a peer "fd:N", which this registry maps back to
// the credentials read at accept time.
class PeerRegistry {
 public:
  void Set(int fd, const PeerCredentials &creds);
  // The peer behind a gRPC peer string ("fd:N", or "ipv4:..." / "ipv6:...").
  Peer Identify(const std::string &grpc_peer) const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<int, PeerCredentials> by_fd_;
};

}  // namespace maru
