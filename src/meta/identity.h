// Who is asking: the one place that turns a connection and a request header
// into the Caller that permissions are checked against. Both doors of the
// server (MetaService over gRPC, FastLaneServer) resolve callers here; this
// is the security boundary, so every rule lives in this unit:
//
//   1. What the transport proves about the other end (a Peer):
//      - a Unix peer: the kernel's SO_PEERCRED (pid, uid, gid) and
//        SO_PEERGROUPS (supplementary groups), read once at accept time;
//      - a Unix peer whose credentials went missing: nobody;
//      - a TCP peer with a verified client certificate or a bearer token
//        that the server's maps (IdentityPolicy) name: that uid and gid;
//      - a TCP peer presenting a token nobody issued: refused (EACCES);
//      - any other TCP peer: nothing (the kernel cannot tell who it is).
//   2. Whom that peer may speak for (Authenticate):
//      - root over Unix (maru-fuse, a root daemon), or a TCP peer mapped to
//        root, acts for its callers: it may assert their identity in the
//        request header;
//      - any other Unix or authenticated TCP peer is itself, whatever its
//        header says;
//      - an unauthenticated TCP peer is nobody, always (--tcp-squash, which
//        is the only behaviour now).
//   3. The header's assertion replaces the peer's identity (uid, gid,
//      groups, pid) only for a peer allowed to make it.
//
// Changing a rule is a change here.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "proto/maru.pb.h"
#include "util/mutex.h"
#include "util/status.h"

namespace maru {

constexpr uint32_t kNobody = 65534;

// The identity permissions are checked against.
struct Caller {
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;
  uint32_t pid = 0;
  // Asserted by a peer allowed to assert (maru-fuse, a root daemon): that
  // peer is root, and so are its sessions and its view of inode numbers.
  bool via_trusted_daemon = false;

  bool is_root() const { return uid == 0; }
  bool InGroup(uint32_t g) const;
  // Whether this caller may use what `owner` opened (a session, its leases
  // and reservations): its owner, root, and a root daemon acting for anyone.
  bool MayActFor(uint32_t owner) const { return owner == uid || is_root() || via_trusted_daemon; }
  // Inode numbers skip the directory search checks of a path: only root
  // and the mount daemon (which the kernel checked) may address by them.
  bool MayAddressInodes() const { return is_root() || via_trusted_daemon; }
};

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<uint32_t> groups;  // supplementary groups, from SO_PEERGROUPS
};

// Reads SO_PEERCRED and SO_PEERGROUPS of a connected Unix socket.
std::optional<PeerCredentials> ReadPeerCredentials(int fd);

// What the transport proves about the other end of a connection.
// Made only by the factories, so that no peer is trusted by default.
class Peer {
 public:
  enum class Kind {
    kUnix,              // creds() are the kernel's word
    kTcp,               // nothing is known
    kTcpAuthenticated,  // creds() (uid, gid) from a verified certificate or token
  };

  static Peer Unix(PeerCredentials creds) { return Peer(Kind::kUnix, std::move(creds)); }
  static Peer Tcp() { return Peer(Kind::kTcp, {}); }
  static Peer TcpAuthenticated(uint32_t uid, uint32_t gid) {
    return Peer(Kind::kTcpAuthenticated, PeerCredentials{0, uid, gid, {}});
  }
  // A Unix connection whose credentials are unknown speaks for nobody.
  static Peer UnknownUnix() { return Unix(PeerCredentials{0, kNobody, kNobody, {}}); }

  Kind kind() const { return kind_; }
  const PeerCredentials &creds() const { return creds_; }  // not for kTcp

 private:
  Peer(Kind kind, PeerCredentials creds) : kind_(kind), creds_(std::move(creds)) {}

  Kind kind_;
  PeerCredentials creds_;
};

// The uid and gid an authenticated TCP caller acts as.
struct MappedId {
  uint32_t uid = kNobody;
  uint32_t gid = kNobody;
};

// Whom the server knows over TCP. An unknown TCP caller is nobody.
struct IdentityPolicy {
  // "CN=name" or "SAN=name" of a verified client certificate -> identity.
  std::map<std::string, MappedId> certs;
  // Bearer token (--token-file) -> identity.
  std::map<std::string, MappedId> tokens;
};

// What a TCP caller presented: the names of its verified client certificate
// ("CN=..." and "SAN=..."; empty without TLS) and its bearer token, if any.
struct TcpProof {
  std::vector<std::string> cert_names;
  std::optional<std::string> token;
};

// The peer a TCP caller proves to be. A token is checked first, and one
// the server did not issue is refused (EACCES, "token refused") rather than
// squashed, so that a misconfigured client finds out. A verified
// certificate that the map does not name is nobody, as is no proof at all.
Result<Peer> IdentifyTcp(const TcpProof &proof, const IdentityPolicy &policy);

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
  // The peer behind a gRPC peer string ("fd:N", or "ipv4:..." / "ipv6:...",
  // which is a plain, unauthenticated TCP peer).
  Peer Identify(const std::string &grpc_peer) const;
  // As above; a TCP peer is identified by what it presented.
  Result<Peer> Identify(const std::string &grpc_peer, const TcpProof &proof,
                        const IdentityPolicy &policy) const;

 private:
  mutable Mutex mu_;
  std::unordered_map<int, PeerCredentials> by_fd_ GUARDED_BY(mu_);
};

}  // namespace maru
