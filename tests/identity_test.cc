// Who the server believes a caller is (src/meta/identity.h): every rule of
// the security boundary, for each kind of peer, and the kernel's credentials
// read from a real socket.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "meta/identity.h"

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

const IdentityPolicy kTrustTcp = IdentityPolicy::WithTcpSquash(false);
const IdentityPolicy kSquashTcp = IdentityPolicy::WithTcpSquash(true);

TEST(Identity, UnixPeerIsWhatTheKernelSays) {
  Peer peer = Peer::Unix(Creds(1000, 100, {10, 20}, 4242));
  ExpectCaller(ResolveCaller(peer, rpc::Header(), kTrustTcp), 1000, 100, {10, 20}, 4242);
}

TEST(Identity, UnixRootPeerMayAssertItsCaller) {
  // maru-fuse runs as root and acts for the process that made the syscall.
  Peer fuse = Peer::Unix(Creds(0, 0, {}, 77));
  ExpectCaller(ResolveCaller(fuse, Asserting(1000, 100, {5, 6}, 9000), kTrustTcp), 1000, 100,
               {5, 6}, 9000);
  ExpectCaller(ResolveCaller(fuse, Asserting(1000, 100, {5, 6}, 9000), kSquashTcp), 1000, 100,
               {5, 6}, 9000);
}

TEST(Identity, UnixRootPeerAssertingNothingIsItself) {
  Peer root = Peer::Unix(Creds(0, 0, {1, 2}, 77));
  ExpectCaller(ResolveCaller(root, rpc::Header(), kTrustTcp), 0, 0, {1, 2}, 77);
}

TEST(Identity, UnsetAssertionIsIgnored) {
  rpc::Header h = Asserting(1000, 100, {5}, 9000);
  h.mutable_caller()->set_set(false);
  ExpectCaller(ResolveCaller(Peer::Unix(Creds(0, 0, {}, 77)), h, kTrustTcp), 0, 0, {}, 77);
  ExpectCaller(ResolveCaller(Peer::Tcp(), h, kTrustTcp), 0, 0, {}, 0);
}

TEST(Identity, NonRootUnixPeersAssertionIsIgnored) {
  Peer user = Peer::Unix(Creds(1000, 100, {10}, 4242));
  ExpectCaller(ResolveCaller(user, Asserting(0, 0, {0}, 1), kTrustTcp), 1000, 100, {10}, 4242);
  ExpectCaller(ResolveCaller(user, Asserting(1001, 101, {}, 1), kTrustTcp), 1000, 100, {10}, 4242);
}

TEST(Identity, TcpPeerIsTrustedToAssertByDefault) {
  ExpectCaller(ResolveCaller(Peer::Tcp(), Asserting(1000, 100, {7}, 55), kTrustTcp), 1000, 100, {7},
               55);
  // Asserting nothing, it is root (as it always was).
  ExpectCaller(ResolveCaller(Peer::Tcp(), rpc::Header(), kTrustTcp), 0, 0, {}, 0);
  EXPECT_EQ(IdentityPolicy().tcp, IdentityPolicy::Tcp::kTrustAsserted);
}

TEST(Identity, SquashedTcpPeerIsNobody) {
  ExpectCaller(ResolveCaller(Peer::Tcp(), rpc::Header(), kSquashTcp), kNobody, kNobody, {}, 0);
  ExpectCaller(ResolveCaller(Peer::Tcp(), Asserting(0, 0, {}, 1), kSquashTcp), kNobody, kNobody, {},
               0);
}

TEST(Identity, AuthenticateSaysWhoMayAssert) {
  EXPECT_TRUE(Authenticate(Peer::Unix(Creds(0, 0, {}, 1)), kSquashTcp).may_assert);
  EXPECT_FALSE(Authenticate(Peer::Unix(Creds(1, 1, {}, 1)), kTrustTcp).may_assert);
  EXPECT_TRUE(Authenticate(Peer::Tcp(), kTrustTcp).may_assert);
  EXPECT_FALSE(Authenticate(Peer::Tcp(), kSquashTcp).may_assert);
  EXPECT_FALSE(Authenticate(Peer::UnknownUnix(), kTrustTcp).may_assert);
}

TEST(Identity, RegistryMapsGrpcPeersToWhatWasReadAtAccept) {
  PeerRegistry peers;
  peers.Set(12, Creds(1000, 100, {10, 20}, 4242));
  Peer known = peers.Identify("fd:12");
  ASSERT_EQ(known.kind(), Peer::Kind::kUnix);
  ExpectCaller(ResolveCaller(known, Asserting(0, 0, {}, 1), kTrustTcp), 1000, 100, {10, 20}, 4242);
  // A descriptor reused by a later connection carries the later credentials.
  peers.Set(12, Creds(0, 0, {}, 7));
  ExpectCaller(ResolveCaller(peers.Identify("fd:12"), Asserting(5, 6, {}, 8), kTrustTcp), 5, 6, {},
               8);
}

TEST(Identity, UnixPeerWithoutCredentialsIsNobody) {
  PeerRegistry peers;
  Peer missing = peers.Identify("fd:99");
  ASSERT_EQ(missing.kind(), Peer::Kind::kUnix);
  // Never root, whatever it asserts, whatever the TCP policy.
  ExpectCaller(ResolveCaller(missing, Asserting(0, 0, {}, 1), kTrustTcp), kNobody, kNobody, {}, 0);
  ExpectCaller(ResolveCaller(missing, rpc::Header(), kSquashTcp), kNobody, kNobody, {}, 0);
}

TEST(Identity, RegistryNamesNetworkPeersTcp) {
  PeerRegistry peers;
  peers.Set(3, Creds(1000, 100, {}, 1));
  EXPECT_EQ(peers.Identify("ipv4:127.0.0.1:4000").kind(), Peer::Kind::kTcp);
  EXPECT_EQ(peers.Identify("ipv6:[::1]:4000").kind(), Peer::Kind::kTcp);
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

}  // namespace
}  // namespace maru
