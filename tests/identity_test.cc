// Who the server believes a caller is (src/meta/identity.h): every rule of
// the security boundary, for each kind of peer, and the kernel's credentials
// read from a real socket.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <vector>

#include "meta/identity.h"
#include "meta/tcp_credentials.h"

namespace maru {
namespace {

PeerCredentials Creds(uint32_t uid, uint32_t gid, std::vector<uint32_t> groups, pid_t pid) {
  PeerCredentials c;
  c.uid = uid;
  c.gid = gid;
  c.groups = std::move(groups);
  c.pid = pid;
  return c;
}

rpc::Header Asserting(uint32_t uid, uint32_t gid, std::vector<uint32_t> groups, uint32_t pid) {
  rpc::Header h;
  rpc::Caller *c = h.mutable_caller();
  c->set_set(true);
  c->set_uid(uid);
  c->set_gid(gid);
  for (uint32_t g : groups) c->add_groups(g);
  c->set_pid(pid);
  return h;
}

void ExpectCaller(const Caller &c, uint32_t uid, uint32_t gid, std::vector<uint32_t> groups,
                  uint32_t pid) {
  EXPECT_EQ(c.uid, uid);
  EXPECT_EQ(c.gid, gid);
  EXPECT_EQ(c.groups, groups);
  EXPECT_EQ(c.pid, pid);
}

// The server's maps: a certificate and a token for uid 1000, and a root
// gateway's certificate.
IdentityPolicy Maps() {
  IdentityPolicy p;
  p.certs["CN=vllm-0"] = MappedId{1000, 100};
  p.certs["SAN=gateway.example"] = MappedId{0, 0};
  p.tokens["s3cret"] = MappedId{1001, 101};
  return p;
}
const IdentityPolicy kNone;

TEST(Identity, UnixPeerIsWhatTheKernelSays) {
  Peer peer = Peer::Unix(Creds(1000, 100, {10, 20}, 4242));
  ExpectCaller(ResolveCaller(peer, rpc::Header(), kNone), 1000, 100, {10, 20}, 4242);
}

TEST(Identity, UnixRootPeerMayAssertItsCaller) {
  // maru-fuse runs as root and acts for the process that made the syscall.
  Peer fuse = Peer::Unix(Creds(0, 0, {}, 77));
  ExpectCaller(ResolveCaller(fuse, Asserting(1000, 100, {5, 6}, 9000), kNone), 1000, 100, {5, 6},
               9000);
}

TEST(Identity, OnlyAnAssertionByATrustedPeerActsForOthers) {
  // The engine lets such a caller use the daemon's (root's) session and
  // address inodes; anyone else only what its own uid opened.
  Peer fuse = Peer::Unix(Creds(0, 0, {}, 77));
  Caller via = ResolveCaller(fuse, Asserting(1000, 100, {}, 9000), kNone);
  EXPECT_TRUE(via.via_trusted_daemon);
  EXPECT_TRUE(via.MayActFor(0));
  EXPECT_TRUE(via.MayAddressInodes());
  Peer user = Peer::Unix(Creds(1000, 100, {}, 4242));
  Caller self = ResolveCaller(user, Asserting(1000, 100, {}, 1), kNone);
  EXPECT_FALSE(self.via_trusted_daemon);
  EXPECT_TRUE(self.MayActFor(1000));
  EXPECT_FALSE(self.MayActFor(1001));
  EXPECT_FALSE(self.MayActFor(0));
  EXPECT_FALSE(self.MayAddressInodes());
  Caller squashed = ResolveCaller(Peer::Tcp(), Asserting(0, 0, {}, 1), kNone);
  EXPECT_FALSE(squashed.via_trusted_daemon);
  EXPECT_FALSE(squashed.MayAddressInodes());
  EXPECT_FALSE(ResolveCaller(fuse, rpc::Header(), kNone).via_trusted_daemon);
}

TEST(Identity, UnixRootPeerAssertingNothingIsItself) {
  Peer root = Peer::Unix(Creds(0, 0, {1, 2}, 77));
  ExpectCaller(ResolveCaller(root, rpc::Header(), kNone), 0, 0, {1, 2}, 77);
}

TEST(Identity, UnsetAssertionIsIgnored) {
  rpc::Header h = Asserting(1000, 100, {5}, 9000);
  h.mutable_caller()->set_set(false);
  ExpectCaller(ResolveCaller(Peer::Unix(Creds(0, 0, {}, 77)), h, kNone), 0, 0, {}, 77);
  ExpectCaller(ResolveCaller(Peer::Tcp(), h, kNone), kNobody, kNobody, {}, 0);
}

TEST(Identity, NonRootUnixPeersAssertionIsIgnored) {
  Peer user = Peer::Unix(Creds(1000, 100, {10}, 4242));
  ExpectCaller(ResolveCaller(user, Asserting(0, 0, {0}, 1), kNone), 1000, 100, {10}, 4242);
  ExpectCaller(ResolveCaller(user, Asserting(1001, 101, {}, 1), kNone), 1000, 100, {10}, 4242);
}

TEST(Identity, UnauthenticatedTcpPeerIsNobodyWhateverItAsserts) {
  ExpectCaller(ResolveCaller(Peer::Tcp(), rpc::Header(), kNone), kNobody, kNobody, {}, 0);
  ExpectCaller(ResolveCaller(Peer::Tcp(), Asserting(0, 0, {}, 1), kNone), kNobody, kNobody, {}, 0);
  ExpectCaller(ResolveCaller(Peer::Tcp(), Asserting(1000, 100, {7}, 55), Maps()), kNobody, kNobody,
               {}, 0);
}

TEST(Identity, MappedCertificateIsItsUser) {
  Result<Peer> peer = IdentifyTcp(TcpProof{{"CN=vllm-0"}, std::nullopt}, Maps());
  ASSERT_TRUE(peer.ok());
  EXPECT_EQ(peer->kind(), Peer::Kind::kTcpAuthenticated);
  ExpectCaller(ResolveCaller(*peer, rpc::Header(), Maps()), 1000, 100, {}, 0);
  // Not root: what it asserts does not count.
  ExpectCaller(ResolveCaller(*peer, Asserting(0, 0, {}, 1), Maps()), 1000, 100, {}, 0);
}

TEST(Identity, CertificateMappedToRootMayAssert) {
  Result<Peer> peer = IdentifyTcp(TcpProof{{"CN=gw", "SAN=gateway.example"}, std::nullopt}, Maps());
  ASSERT_TRUE(peer.ok());
  ExpectCaller(ResolveCaller(*peer, rpc::Header(), Maps()), 0, 0, {}, 0);
  ExpectCaller(ResolveCaller(*peer, Asserting(1000, 100, {5}, 9), Maps()), 1000, 100, {5}, 9);
}

TEST(Identity, UnmappedCertificateIsNobody) {
  Result<Peer> peer = IdentifyTcp(TcpProof{{"CN=stranger"}, std::nullopt}, Maps());
  ASSERT_TRUE(peer.ok());
  EXPECT_EQ(peer->kind(), Peer::Kind::kTcp);
  ExpectCaller(ResolveCaller(*peer, Asserting(0, 0, {}, 1), Maps()), kNobody, kNobody, {}, 0);
}

TEST(Identity, KnownTokenIsItsUserUnknownTokenIsRefused) {
  Result<Peer> peer = IdentifyTcp(TcpProof{{}, std::string("s3cret")}, Maps());
  ASSERT_TRUE(peer.ok());
  ExpectCaller(ResolveCaller(*peer, Asserting(0, 0, {}, 1), Maps()), 1001, 101, {}, 0);
  Result<Peer> wrong = IdentifyTcp(TcpProof{{"CN=vllm-0"}, std::string("guess")}, Maps());
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().errnum(), EACCES);
  EXPECT_NE(wrong.status().message().find("token refused"), std::string::npos);
}

TEST(Identity, AuthenticateSaysWhoMayAssert) {
  EXPECT_TRUE(Authenticate(Peer::Unix(Creds(0, 0, {}, 1)), kNone).may_assert);
  EXPECT_FALSE(Authenticate(Peer::Unix(Creds(1, 1, {}, 1)), kNone).may_assert);
  EXPECT_FALSE(Authenticate(Peer::Tcp(), kNone).may_assert);
  EXPECT_TRUE(Authenticate(Peer::TcpAuthenticated(0, 0), kNone).may_assert);
  EXPECT_FALSE(Authenticate(Peer::TcpAuthenticated(1000, 100), kNone).may_assert);
  EXPECT_FALSE(Authenticate(Peer::UnknownUnix(), kNone).may_assert);
}

TEST(Identity, RegistryMapsGrpcPeersToWhatWasReadAtAccept) {
  PeerRegistry peers;
  peers.Set(12, Creds(1000, 100, {10, 20}, 4242));
  Peer known = peers.Identify("fd:12");
  ASSERT_EQ(known.kind(), Peer::Kind::kUnix);
  ExpectCaller(ResolveCaller(known, Asserting(0, 0, {}, 1), kNone), 1000, 100, {10, 20}, 4242);
  // A descriptor reused by a later connection carries the later credentials.
  peers.Set(12, Creds(0, 0, {}, 7));
  ExpectCaller(ResolveCaller(peers.Identify("fd:12"), Asserting(5, 6, {}, 8), kNone), 5, 6, {}, 8);
  // A token means nothing on a Unix connection: the kernel's word counts.
  Result<Peer> unix_peer = peers.Identify("fd:12", TcpProof{{}, std::string("guess")}, Maps());
  ASSERT_TRUE(unix_peer.ok());
  EXPECT_EQ(unix_peer->kind(), Peer::Kind::kUnix);
}

TEST(Identity, UnixPeerWithoutCredentialsIsNobody) {
  PeerRegistry peers;
  Peer missing = peers.Identify("fd:99");
  ASSERT_EQ(missing.kind(), Peer::Kind::kUnix);
  // Never root, whatever it asserts.
  ExpectCaller(ResolveCaller(missing, Asserting(0, 0, {}, 1), kNone), kNobody, kNobody, {}, 0);
}

TEST(Identity, RegistryNamesNetworkPeersTcp) {
  PeerRegistry peers;
  peers.Set(3, Creds(1000, 100, {}, 1));
  EXPECT_EQ(peers.Identify("ipv4:127.0.0.1:4000").kind(), Peer::Kind::kTcp);
  EXPECT_EQ(peers.Identify("ipv6:[::1]:4000").kind(), Peer::Kind::kTcp);
  Result<Peer> token = peers.Identify("ipv4:127.0.0.1:4000", TcpProof{{}, "s3cret"}, Maps());
  ASSERT_TRUE(token.ok());
  EXPECT_EQ(token->kind(), Peer::Kind::kTcpAuthenticated);
}

TEST(Identity, ReadsTheKernelsCredentialsOfASocket) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  std::optional<PeerCredentials> creds = ReadPeerCredentials(fds[0]);
  close(fds[0]);
  close(fds[1]);
  ASSERT_TRUE(creds);
  EXPECT_EQ(creds->pid, getpid());
  EXPECT_EQ(creds->uid, geteuid());
  EXPECT_EQ(creds->gid, getegid());
  std::vector<gid_t> groups(static_cast<size_t>(getgroups(0, nullptr)));
  ASSERT_EQ(getgroups(static_cast<int>(groups.size()), groups.data()),
            static_cast<int>(groups.size()));
  std::vector<uint32_t> want(groups.begin(), groups.end()), got = creds->groups;
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
}

TEST(Identity, NoCredentialsFromANonSocket) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  EXPECT_FALSE(ReadPeerCredentials(fds[0]));
  close(fds[0]);
  close(fds[1]);
}

TEST(TcpCredentials, IdentityMappingsParse) {
  IdentityPolicy p;
  ASSERT_TRUE(AddIdentityMapping("CN=vllm-0=1000:100", &p).ok());
  ASSERT_TRUE(AddIdentityMapping("SAN=host.example=1002", &p).ok());
  EXPECT_EQ(p.certs["CN=vllm-0"].uid, 1000u);
  EXPECT_EQ(p.certs["CN=vllm-0"].gid, 100u);
  EXPECT_EQ(p.certs["SAN=host.example"].gid, 1002u);
  EXPECT_FALSE(AddIdentityMapping("vllm-0=1000", &p).ok());
  EXPECT_FALSE(AddIdentityMapping("CN=vllm-0=x", &p).ok());
  EXPECT_FALSE(AddIdentityMapping("CN==1000", &p).ok());
}

TEST(TcpCredentials, TokenFileMustBePrivate) {
  char path[] = "/tmp/maru-token-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << "# tokens\nabc 1000:100\n  def\t1001  \n";
  ASSERT_EQ(chmod(path, 0600), 0);
  IdentityPolicy p;
  Status s = LoadTokenFile(path, &p);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(p.tokens["abc"].uid, 1000u);
  EXPECT_EQ(p.tokens["abc"].gid, 100u);
  EXPECT_EQ(p.tokens["def"].gid, 1001u);
  ASSERT_EQ(chmod(path, 0644), 0);
  s = LoadTokenFile(path, &p);
  EXPECT_EQ(s.errnum(), EPERM);
  EXPECT_NE(s.message().find("0600"), std::string::npos) << s.message();
  unlink(path);
}

}  // namespace
}  // namespace maru
