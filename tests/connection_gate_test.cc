// ConnectionGate: the shares of the descriptor limit and the caps per TCP
// listener and peer; Unix sockets handed away are counted until closed.
#include "meta/connection_gate.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "harness.h"

namespace maru {
namespace {

TEST(ConnectionGate, SharesTheDescriptorsAndKeepsAReserve) {
  ConnectionGate gate(20000, {});
  EXPECT_EQ(gate.reserve(), 2500u);
  EXPECT_EQ(gate.tcp_connections(), 17500u / 2 / ConnectionGate::kTcpCost);
  EXPECT_EQ(gate.fast_lane_connections(), 1024u);
  ConnectionGate small(1024, {});
  EXPECT_EQ(small.reserve(), 128u);
  EXPECT_EQ(small.fast_lane_connections(), 224u);
}

TEST(ConnectionGate, CapsPerPeerAndPerListener) {
  ConnectionGate gate(1 << 20, {/*tcp_per_listener=*/5, /*tcp_per_peer=*/2});
  EXPECT_TRUE(gate.AdmitTcp(1, "10.0.0.1"));
  EXPECT_TRUE(gate.AdmitTcp(1, "10.0.0.1"));
  EXPECT_FALSE(gate.AdmitTcp(1, "10.0.0.1"));  // its two
  EXPECT_TRUE(gate.AdmitTcp(2, "10.0.0.2"));   // another peer, another listener
  EXPECT_TRUE(gate.AdmitTcp(1, "10.0.0.3"));
  EXPECT_TRUE(gate.AdmitTcp(1, "10.0.0.3"));
  EXPECT_TRUE(gate.AdmitTcp(1, "10.0.0.4"));
  EXPECT_FALSE(gate.AdmitTcp(1, "10.0.0.5"));  // the listener's five
  EXPECT_TRUE(gate.AdmitTcp(2, "10.0.0.5"));
  gate.LeaveTcp(1, "10.0.0.1");
  EXPECT_TRUE(gate.AdmitTcp(1, "10.0.0.1"));  // a place given back is taken again
}

TEST(ConnectionGate, TheTcpShareIsNeverPassed) {
  ConnectionGate gate(1024, {0, 0});  // no caps but the descriptors'
  uint32_t admitted = 0;
  while (admitted < 10000 && gate.AdmitTcp(1, "10.0.0.1")) ++admitted;
  EXPECT_EQ(admitted, gate.tcp_connections());
}

TEST(ConnectionGate, UnixSocketsCountUntilTheirDescriptorNamesAnotherFile) {
  ConnectionGate gate(320, {});  // (320 - 64) / 4 = 64 Unix sockets
  std::vector<int> fds;
  for (;;) {
    int pair[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
    close(pair[1]);
    if (!gate.AdmitUnix(pair[0])) {
      close(pair[0]);
      break;
    }
    fds.push_back(pair[0]);
  }
  EXPECT_EQ(fds.size(), 64u);
  // Closed (as gRPC closes them), their places come back.
  for (int fd : fds) close(fd);
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  EXPECT_TRUE(maru_test::WaitFor([&] { return gate.AdmitUnix(pair[0]); }));
  close(pair[0]);
  close(pair[1]);
}

}  // namespace
}  // namespace maru
