// The fast lane over TCP (docs/security.md, "The fast lane over TCP")
// against a real maru-server with a token file: a token client of
// libmaru_direct uses it (the server's FastLaneTcp counter grows), and
// MARU_FAST_LANE=0 turns it off; a ticket is good once, for its session
// and its uid only, and not after its session ends; a connection that
// names another session, or sends lying frames, is closed; the TCP caps
// per peer hold on the lane's port.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "harness.h"
#include "proto/fast_lane.h"
#include "proto/maru.grpc.pb.h"
#include "util/frame.h"

namespace {

using maru_test::Server;
using maru_test::TestPool;

// A TCP connection to 127.0.0.1:`port` from address `from`; -1 if refused.
int Connect(int port, const char *from = "127.0.0.1") {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in src{};
  src.sin_family = AF_INET;
  inet_pton(AF_INET, from, &src.sin_addr);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(static_cast<uint16_t>(port));
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (bind(fd, reinterpret_cast<sockaddr *>(&src), sizeof(src)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr *>(&dst), sizeof(dst)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the server closed `fd` (its end of stream reached), after
// draining whatever it sent first.
bool ClosedByServer(int fd) {
  char buf[256];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    if (n < 0) return false;  // timed out: still open
  }
}

struct Ticket {
  uint64_t session = 0;
  std::string ticket;
  int port = 0;
};

class TcpFastLane : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = maru_test::FreePort();
    ASSERT_NE(port_, 0);
    tcp_ = "tcp://127.0.0.1:" + std::to_string(port_);
    const std::string d = dir_.path();
    std::ofstream(d + "/tokens") << "alice-token 1001:1001\nbob-token 1002:1002\n";
    ASSERT_EQ(chmod((d + "/tokens").c_str(), 0600), 0);
    std::ofstream(d + "/alice") << "alice-token\n";
    std::ofstream(d + "/bob") << "bob-token\n";
    server_ = std::make_unique<Server>(
        pool_.path(), std::vector<std::string>{"--listen", tcp_, "--token-file", d + "/tokens",
                                               "--max-tcp-per-peer", "6"});
    ASSERT_TRUE(server_->Start());
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                   grpc::InsecureChannelCredentials());
    // The server answers on its Unix socket before it reaches the TCP one.
    ASSERT_TRUE(
        channel_->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(30)));
    stub_ = maru::rpc::Meta::NewStub(channel_);
  }

  // A session opened over TCP with `token`, as libmaru_direct opens one.
  Ticket Open(const std::string &token) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    maru::rpc::OpenSessionRequest req;
    req.set_client("tcp-fast-lane-test");
    maru::rpc::OpenSessionReply rep;
    grpc::Status st = stub_->OpenSession(&ctx, req, &rep);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(rep.error(), 0);
    return {rep.session(), rep.fast_lane_ticket(), static_cast<int>(rep.fast_lane_port())};
  }

  void Close(const std::string &token, uint64_t session) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    maru::rpc::HeartbeatRequest req;
    req.mutable_header()->set_session(session);
    maru::rpc::ErrorReply rep;
    ASSERT_TRUE(stub_->CloseSession(&ctx, req, &rep).ok());
    ASSERT_EQ(rep.error(), 0);
  }

  // Presents `hello` on a new lane connection: the connection once
  // admitted (the next ticket in `next`), else -1 (and it is closed).
  int Hello(int lane_port, const std::string &hello, std::string *next = nullptr,
            const char *from = "127.0.0.1") {
    int fd = Connect(lane_port, from);
    if (fd < 0) return -1;
    uint8_t code = 0;
    std::string reply;
    if (!maru::WriteFrame(fd, maru::fastlane::kHello, hello).ok() ||
        !maru::ReadFrame(fd, &code, &reply, maru::fastlane::kMaxHello).ok() ||
        code != maru::fastlane::kReplyOk) {
      EXPECT_TRUE(ClosedByServer(fd));
      close(fd);
      return -1;
    }
    if (next) *next = reply;
    return fd;
  }

  // Sends a CountPrefix of `session` on an admitted connection: true if
  // answered, false if the server closed the connection.
  bool Ask(int fd, uint64_t session) {
    maru::rpc::LookupPrefixRequest req;
    req.mutable_header()->set_session(session);
    req.add_paths("/nothing");
    std::string payload;
    req.SerializeToString(&payload);
    uint8_t code = 0;
    std::string reply;
    if (!maru::WriteFrame(fd, maru::fastlane::kCountPrefix, payload).ok()) return false;
    if (!maru::ReadFrame(fd, &code, &reply, maru::fastlane::kMaxPayload).ok()) return false;
    if (code != maru::fastlane::kReplyOk) return !ClosedByServer(fd);
    return true;
  }

  // The server's count (and errors) of operation `op` (maructl stats).
  uint64_t Count(const std::string &op, uint64_t *errors = nullptr) {
    std::string out;
    maru_test::Run(maru_test::MaructlBinary() + " stats --server " + server_->address(), &out);
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream words(line);
      std::string name;
      uint64_t count = 0, errs = 0;
      if (words >> name >> count >> errs && name == op) {
        if (errors) *errors = errs;
        return count;
      }
    }
    if (errors) *errors = 0;
    return 0;
  }

  std::string Env(const std::string &who) { return "MARU_TOKEN_FILE=" + dir_.path() + "/" + who; }

  maru_test::TempDir dir_;
  TestPool pool_{64ull << 20};
  std::unique_ptr<Server> server_;
  int port_ = 0;
  std::string tcp_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<maru::rpc::Meta::Stub> stub_;
};

TEST_F(TcpFastLane, ATokenClientUsesItAndCanTurnItOff) {
  std::string out;
  const std::string script = "store /a 4096 + load /a 4096 " + pool_.path() + " + store /b 4096";
  ASSERT_EQ(maru_test::Run(Env("alice") + " " + maru_test::ClientCommand(tcp_, script), &out), 0)
      << out;
  const uint64_t served = Count("FastLaneTcp");
  EXPECT_GE(served, 3u) << "creates, seals and the open went over gRPC";
  EXPECT_GE(Count("FastLaneTcpHello"), 1u);
  // Off: the same work, all over gRPC.
  ASSERT_EQ(maru_test::Run(
                Env("alice") + " MARU_FAST_LANE=0 " +
                    maru_test::ClientCommand(tcp_, "store /c 4096 + load /c 4096 " + pool_.path()),
                &out),
            0)
      << out;
  EXPECT_EQ(Count("FastLaneTcp"), served);
}

TEST_F(TcpFastLane, ATicketIsGoodOnceAndForItsSessionOnly) {
  Ticket t = Open("alice-token");
  ASSERT_NE(t.port, 0);
  ASSERT_EQ(t.ticket.size(), 32u);
  std::string next;
  int fd = Hello(t.port, t.ticket + "alice-token", &next);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(Ask(fd, t.session));
  // Stolen: presented again, it is refused.
  EXPECT_EQ(Hello(t.port, t.ticket + "alice-token"), -1);
  EXPECT_EQ(Hello(t.port, t.ticket), -1);
  // A wrong one: refused.
  std::string wrong = next;
  wrong[20] ^= 1;
  EXPECT_EQ(Hello(t.port, wrong + "alice-token"), -1);
  EXPECT_EQ(Hello(t.port, std::string(32, 'x')), -1);
  // The ticket of another session cannot serve this one: the connection
  // is closed at the first request naming another session.
  Ticket other = Open("alice-token");
  int fd2 = Hello(other.port, other.ticket + "alice-token");
  ASSERT_GE(fd2, 0);
  EXPECT_FALSE(Ask(fd2, t.session));
  close(fd2);
  EXPECT_TRUE(Ask(fd, t.session));
  close(fd);
  // Expired: its session ended, a ticket never presented is useless.
  Close("alice-token", t.session);
  EXPECT_EQ(Hello(t.port, next + "alice-token"), -1);
  uint64_t refused = 0;
  Count("FastLaneTcpHello", &refused);
  EXPECT_GE(refused, 5u);
}

TEST_F(TcpFastLane, AnotherUidCannotUseTheTicket) {
  Ticket t = Open("alice-token");
  // Bob, a process of another uid with a token of his own, holding
  // Alice's ticket: his token proves he is not the ticket's uid.
  const std::string probe = maru_test::BinDir("tests/probe_client");
  char hex[3];
  std::string ticket_hex;
  for (unsigned char c : t.ticket) {
    snprintf(hex, sizeof(hex), "%02x", c);
    ticket_hex += hex;
  }
  std::string out;
  const int rc =
      maru_test::Run("setpriv --reuid=65534 --regid=65534 --clear-groups " + probe + " " + tcp_ +
                         " fast-hello " + std::to_string(t.port) + " " + ticket_hex + " bob-token",
                     &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("refused"), std::string::npos) << out;
  // Refused once, it is gone: not even Alice may use it now.
  EXPECT_EQ(Hello(t.port, t.ticket + "alice-token"), -1);
  // Alice's next ticket works for Alice.
  Ticket again = Open("alice-token");
  int fd = Hello(again.port, again.ticket + "alice-token");
  EXPECT_GE(fd, 0);
  if (fd >= 0) close(fd);
}

TEST_F(TcpFastLane, LyingFramesCloseTheConnection) {
  Ticket t = Open("alice-token");
  // A hello announcing more than a hello may hold.
  int fd = Connect(t.port);
  ASSERT_GE(fd, 0);
  uint8_t header[5] = {0xff, 0xff, 0xff, 0x7f, maru::fastlane::kHello};
  ASSERT_EQ(write(fd, header, sizeof(header)), 5);
  EXPECT_TRUE(ClosedByServer(fd));
  close(fd);
  // A request before any hello.
  fd = Connect(t.port);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(maru::WriteFrame(fd, maru::fastlane::kCountPrefix, "").ok());
  EXPECT_TRUE(ClosedByServer(fd));
  close(fd);
  // After the hello: a length past the lane's limit, a header cut short,
  // an unknown code, and a body that is not the message.
  std::string next = t.ticket;
  const std::vector<std::string> lies = {std::string("\xff\xff\xff\xff\x01", 5),
                                         std::string("\x10\x00", 2),
                                         std::string("\x00\x00\x00\x00\x63", 5),
                                         std::string("\x04\x00\x00\x00\x01\xff\xff\xff\xff", 9)};
  for (const std::string &lie : lies) {
    std::string ticket = next;
    fd = Hello(t.port, ticket + "alice-token", &next);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, lie.data(), lie.size()), static_cast<ssize_t>(lie.size()));
    if (lie.size() == 2) shutdown(fd, SHUT_WR);  // the rest never comes
    EXPECT_TRUE(ClosedByServer(fd)) << "lie of " << lie.size() << " bytes";
    close(fd);
  }
  // The server serves on.
  fd = Hello(t.port, next + "alice-token");
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(Ask(fd, t.session));
  close(fd);
}

TEST_F(TcpFastLane, TheCapPerPeerHolds) {
  Ticket t = Open("alice-token");
  // Connections from one address up to --max-tcp-per-peer are admitted
  // (each answered), the next is closed at once, and other peers are
  // served meanwhile.
  std::vector<int> held;
  std::string ticket = t.ticket;
  for (int i = 0; i < 6; ++i) {
    std::string next;
    int fd = Hello(t.port, ticket + "alice-token", &next, "127.0.0.9");
    ASSERT_GE(fd, 0) << "connection " << i;
    held.push_back(fd);
    ticket = next;
  }
  int over = Connect(t.port, "127.0.0.9");
  ASSERT_GE(over, 0);
  EXPECT_TRUE(ClosedByServer(over));
  close(over);
  int fd = Hello(t.port, ticket + "alice-token", &ticket);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(Ask(fd, t.session));
  close(fd);
  // A place given back is taken again.
  close(held.back());
  held.pop_back();
  int again = -1;
  EXPECT_TRUE(maru_test::WaitFor([&] {
    std::string next;
    // A refused hello costs the ticket: take a new one each time.
    again = Hello(t.port, ticket + "alice-token", &next, "127.0.0.9");
    if (again < 0) ticket = Open("alice-token").ticket;
    return again >= 0;
  }));
  if (again >= 0) close(again);
  for (int h : held) close(h);
}

}  // namespace
