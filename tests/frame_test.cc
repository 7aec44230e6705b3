// Fast-lane framing (u32 length, u8 code, payload): ReadFrame/WriteFrame on
// a socketpair, and the real FastLaneServer's reading loop facing truncated,
// oversized, lying and garbage frames.
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "fast_lane.h"
#include "harness.h"
#include "meta/fast_lane_server.h"
#include "meta/meta_engine.h"
#include "util/frame.h"

namespace maru {
namespace {

// Both ends of a Unix stream socketpair, closed on the way out.
class Pair {
 public:
  Pair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd_), 0); }
  ~Pair() {
    CloseA();
    CloseB();
  }
  int a() const { return fd_[0]; }
  int b() const { return fd_[1]; }
  void CloseA() { Close(&fd_[0]); }
  void CloseB() { Close(&fd_[1]); }

 private:
  static void Close(int *fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
  int fd_[2] = {-1, -1};
};

// A raw header, as a peer that lies about the length would send it.
std::string Header(uint32_t len, uint8_t code) {
  std::string h(5, '\0');
  memcpy(h.data(), &len, 4);
  h[4] = static_cast<char>(code);
  return h;
}

void SendRaw(int fd, const std::string &bytes) {
  ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
}

TEST(Frame, RoundTripsEmptyAndSmallPayloadsWithAnyCode) {
  Pair p;
  for (uint8_t code : {uint8_t{0}, uint8_t{1}, uint8_t{254}, uint8_t{255}}) {
    for (const std::string &payload : {std::string(), std::string("x"), std::string("a\0b", 3)}) {
      ASSERT_TRUE(WriteFrame(p.a(), code, payload).ok());
      uint8_t got_code = 0x5a;
      std::string got = "stale";
      ASSERT_TRUE(ReadFrame(p.b(), &got_code, &got, 1024).ok());
      EXPECT_EQ(got_code, code);
      EXPECT_EQ(got, payload);
    }
  }
}

TEST(Frame, HeaderIsLittleEndianLengthThenCode) {
  Pair p;
  ASSERT_TRUE(WriteFrame(p.a(), 7, "abc").ok());
  char raw[8];
  ASSERT_EQ(recv(p.b(), raw, sizeof(raw), MSG_WAITALL), 8);
  EXPECT_EQ(std::string(raw, 8), std::string("\x03\x00\x00\x00\x07"
                                             "abc",
                                             8));
}

TEST(Frame, BackToBackFramesAreReadOneAtATime) {
  Pair p;
  // Two frames in one send: the reader must not swallow the second.
  SendRaw(p.a(), Header(2, 1) + "hi" + Header(0, 2) + Header(3, 3) + "end");
  uint8_t code;
  std::string payload;
  ASSERT_TRUE(ReadFrame(p.b(), &code, &payload, 16).ok());
  EXPECT_EQ(code, 1);
  EXPECT_EQ(payload, "hi");
  ASSERT_TRUE(ReadFrame(p.b(), &code, &payload, 16).ok());
  EXPECT_EQ(code, 2);
  EXPECT_EQ(payload, "");
  ASSERT_TRUE(ReadFrame(p.b(), &code, &payload, 16).ok());
  EXPECT_EQ(code, 3);
  EXPECT_EQ(payload, "end");
}

TEST(Frame, LengthAtTheLimitIsReadAndOneMoreIsRefused) {
  Pair p;
  ASSERT_TRUE(WriteFrame(p.a(), 1, std::string(64, 'm')).ok());
  uint8_t code;
  std::string payload;
  ASSERT_TRUE(ReadFrame(p.b(), &code, &payload, 64).ok());
  EXPECT_EQ(payload.size(), 64u);
  ASSERT_TRUE(WriteFrame(p.a(), 1, std::string(65, 'm')).ok());
  EXPECT_EQ(ReadFrame(p.b(), &code, &payload, 64).errnum(), EMSGSIZE);
}

TEST(Frame, LyingMaximalLengthIsRefusedBeforeAnyAllocation) {
  Pair p;
  SendRaw(p.a(), Header(UINT32_MAX, 1));
  uint8_t code;
  std::string payload;
  EXPECT_EQ(ReadFrame(p.b(), &code, &payload, fastlane::kMaxPayload).errnum(), EMSGSIZE);
  EXPECT_LT(payload.capacity(), size_t{1} << 20);
}

// Bytes malloc has handed out, from its arenas and as separate mappings.
size_t HeapInUse() {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

// A header that announces a large payload must not make the reader allocate
// it before the bytes arrive: idle connections would otherwise pin memory.
TEST(Frame, AnnouncedLengthIsNotAllocatedUpFront) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  const uint32_t announced = 16u << 20;
  uint8_t header[5 + 10] = {};
  memcpy(header, &announced, 4);
  header[4] = 1;
  ASSERT_EQ(write(sv[0], header, sizeof(header)), static_cast<ssize_t>(sizeof(header)));
  const size_t before = HeapInUse();
  Status result;
  std::thread reader([&] {
    uint8_t code;
    std::string payload;
    result = ReadFrame(sv[1], &code, &payload, announced);
  });
  // Wait until the reader has taken every byte sent, and is blocked for more.
  for (int queued = 1; queued > 0;) {
    ASSERT_EQ(ioctl(sv[1], FIONREAD, &queued), 0);
    if (queued > 0) std::this_thread::yield();
  }
  const size_t during = HeapInUse();
  close(sv[0]);
  reader.join();
  EXPECT_EQ(result.errnum(), ECONNRESET);
  EXPECT_LT(during > before ? during - before : 0, size_t{1} << 20);
  close(sv[1]);
}

TEST(Frame, LargestFastLanePayloadRoundTrips) {
  // Bigger than any socket buffer: writer and reader must run at once, and
  // short writes must be resumed where they stopped.
  Pair p;
  std::string big(fastlane::kMaxPayload, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 + (i >> 12));
  Status written;
  std::thread writer([&] { written = WriteFrame(p.a(), 9, big); });
  uint8_t code;
  std::string payload;
  Status read = ReadFrame(p.b(), &code, &payload, fastlane::kMaxPayload);
  writer.join();
  ASSERT_TRUE(written.ok()) << written.ToString();
  ASSERT_TRUE(read.ok()) << read.ToString();
  EXPECT_EQ(code, 9);
  EXPECT_TRUE(payload == big);
}

TEST(Frame, EndOfStreamAnywhereIsAConnectionReset) {
  uint8_t code;
  std::string payload;
  {  // before any byte
    Pair p;
    p.CloseA();
    EXPECT_EQ(ReadFrame(p.b(), &code, &payload, 64).errnum(), ECONNRESET);
  }
  {  // inside the header
    Pair p;
    SendRaw(p.a(), Header(10, 1).substr(0, 3));
    p.CloseA();
    EXPECT_EQ(ReadFrame(p.b(), &code, &payload, 64).errnum(), ECONNRESET);
  }
  {  // a length that promises more than comes
    Pair p;
    SendRaw(p.a(), Header(10, 1) + "short");
    p.CloseA();
    EXPECT_EQ(ReadFrame(p.b(), &code, &payload, 64).errnum(), ECONNRESET);
  }
}

TEST(Frame, WritingToAGonePeerIsAnErrorNotASignal) {
  Pair p;
  p.CloseB();
  Status s = WriteFrame(p.a(), 1, "anyone there?");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.errnum(), EPIPE) << s.ToString();
}

// The real server-side reading loop: a FastLaneServer on a real engine.
class FastLaneFrameTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions options;
    options.pool_paths = {pool_.path()};
    options.db_dir = dir_.path() + "/db";
    Result<std::unique_ptr<MetaEngine>> e = MetaEngine::Open(options);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(*e);
    server_ = std::make_unique<FastLaneServer>(dir_.path() + "/maru.sock" + fastlane::kSuffix,
                                               engine_.get(), IdentityPolicy{});
    Status bound = server_->Bind();
    ASSERT_TRUE(bound.ok()) << bound.ToString();
    server_->Start();
  }
  void TearDown() override {
    if (fd_ >= 0) close(fd_);
    server_.reset();
    engine_.reset();
  }

  // A new connection, replacing the one before.
  void Connect() {
    if (fd_ >= 0) close(fd_);
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd_, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    ASSERT_LT(server_->path().size(), sizeof(addr.sun_path));
    strcpy(addr.sun_path, server_->path().c_str());
    ASSERT_EQ(connect(fd_, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)), 0)
        << strerror(errno);
  }

  // A LookupPrefix for a session nobody holds: the engine answers ENOTCONN,
  // which shows the frame was parsed and reached it.
  void ExpectLookupAnswered() {
    rpc::LookupPrefixRequest req;
    req.mutable_header()->set_session(12345);
    req.add_paths("/nothing");
    ASSERT_TRUE(WriteFrame(fd_, fastlane::kLookupPrefix, req.SerializeAsString()).ok());
    uint8_t code;
    std::string payload;
    Status s = ReadFrame(fd_, &code, &payload, fastlane::kMaxPayload);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(code, fastlane::kReplyOk);
    rpc::LookupPrefixReply rep;
    ASSERT_TRUE(rep.ParseFromString(payload));
    EXPECT_EQ(rep.error(), ENOTCONN);
  }

  // The server closed the connection, having replied `code` first if
  // `replied`.
  void ExpectClosed(bool replied, uint8_t code = fastlane::kBadFrame) {
    uint8_t got;
    std::string payload;
    if (replied) {
      Status s = ReadFrame(fd_, &got, &payload, fastlane::kMaxPayload);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(got, code);
      EXPECT_EQ(payload, "");
    }
    EXPECT_EQ(ReadFrame(fd_, &got, &payload, fastlane::kMaxPayload).errnum(), ECONNRESET);
  }

  maru_test::TempDir dir_;
  maru_test::TestPool pool_{64ull << 20};
  std::unique_ptr<MetaEngine> engine_;
  std::unique_ptr<FastLaneServer> server_;
  int fd_ = -1;
};

TEST_F(FastLaneFrameTest, WellFormedRequestsAreAnsweredOnOneConnection) {
  Connect();
  ExpectLookupAnswered();
  ExpectLookupAnswered();
}

TEST_F(FastLaneFrameTest, UnknownOperationCodesGetBadFrameAndAClose) {
  for (uint8_t op : {fastlane::kReplyOk, fastlane::kOpLimit, uint8_t{200}, fastlane::kBadFrame}) {
    SCOPED_TRACE(static_cast<int>(op));
    Connect();
    ASSERT_TRUE(WriteFrame(fd_, op, "").ok());
    ExpectClosed(true);
  }
  // The server still serves others.
  Connect();
  ExpectLookupAnswered();
}

TEST_F(FastLaneFrameTest, UnparsablePayloadGetsBadFrameAndAClose) {
  Connect();
  ASSERT_TRUE(WriteFrame(fd_, fastlane::kOpen, std::string("\xff\xff\xff\xff", 4)).ok());
  ExpectClosed(true);
}

TEST_F(FastLaneFrameTest, PayloadAtTheLimitIsReadWholeThenJudged) {
  // Zero bytes are no valid protobuf (field number 0): read whole, then
  // refused as a bad frame, not as an oversized one.
  Connect();
  std::thread writer([&] {
    EXPECT_TRUE(WriteFrame(fd_, fastlane::kOpen, std::string(fastlane::kMaxPayload, '\0')).ok());
  });
  ExpectClosed(true);
  writer.join();
}

TEST_F(FastLaneFrameTest, OversizedLengthClosesWithoutReading) {
  Connect();
  SendRaw(fd_, Header(fastlane::kMaxPayload + 1, fastlane::kOpen));
  ExpectClosed(false);
  Connect();
  SendRaw(fd_, Header(UINT32_MAX, fastlane::kLookupPrefix));
  ExpectClosed(false);
}

TEST_F(FastLaneFrameTest, TruncatedFramesEndTheConnectionQuietly) {
  Connect();
  SendRaw(fd_, Header(100, fastlane::kOpen).substr(0, 2));
  ASSERT_EQ(shutdown(fd_, SHUT_WR), 0);
  ExpectClosed(false);
  Connect();
  SendRaw(fd_, Header(100, fastlane::kOpen) + "only a little");  // the length lies
  ASSERT_EQ(shutdown(fd_, SHUT_WR), 0);
  ExpectClosed(false);
  Connect();
  ExpectLookupAnswered();
}

}  // namespace
}  // namespace maru
