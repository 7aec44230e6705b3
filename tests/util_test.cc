// Path rules, sizes, addresses, checksums, flags, frames.
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "util/address.h"
#include "util/checksum.h"
#include "util/flags.h"
#include "util/frame.h"
#include "util/path.h"
#include "util/units.h"

namespace maru {
namespace {

TEST(Path, AcceptsAbsolutePathsAndLmcacheKeys) {
  Result<std::vector<std::string>> p = SplitPath("/llama/meta-llama@8@0@a1b2%3d.c@bfloat16.data");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[1], "meta-llama@8@0@a1b2%3d.c@bfloat16.data");
  EXPECT_EQ(SplitPath("//a///b/")->size(), 2u);
  EXPECT_TRUE(SplitPath("/")->empty());
  EXPECT_EQ(JoinPath(*SplitPath("//a//b")), "/a/b");
}

TEST(Path, RejectsBadPaths) {
  EXPECT_EQ(SplitPath("").status().errnum(), EINVAL);
  EXPECT_EQ(SplitPath("relative/x").status().errnum(), EINVAL);
  EXPECT_EQ(SplitPath("/a/../b").status().errnum(), EINVAL);
  EXPECT_EQ(SplitPath("/a/./b").status().errnum(), EINVAL);
  EXPECT_EQ(SplitPath("/" + std::string(256, 'x')).status().errnum(), ENAMETOOLONG);
  EXPECT_TRUE(SplitPath("/" + std::string(255, 'x')).ok());
  EXPECT_EQ(SplitPath(std::string(5000, '/')).status().errnum(), ENAMETOOLONG);
  EXPECT_EQ(ValidateName(std::string("a\0b", 3)).errnum(), EINVAL);
}

TEST(Units, ParsesAndFormatsSizes) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("512M"), 512ull << 20);
  EXPECT_EQ(*ParseSize("4G"), 4ull << 30);
  EXPECT_EQ(*ParseSize("2GiB"), 2ull << 30);
  EXPECT_EQ(*ParseSize("64k"), 64ull << 10);
  EXPECT_FALSE(ParseSize("").ok());
  EXPECT_FALSE(ParseSize("12Q").ok());
  EXPECT_FALSE(ParseSize("-1").ok());
  EXPECT_EQ(ParseSize("99999999999T").status().errnum(), ERANGE);
  EXPECT_EQ(FormatSize(32ull << 20), "32M");
  EXPECT_EQ(FormatSize(1536), "1.5K");
}

TEST(Address, ParsesUnixAndTcp) {
  Result<Address> u = ParseAddress("unix:///run/maru/maru.sock");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->GrpcTarget(), "unix:/run/maru/maru.sock");
  Result<Address> t = ParseAddress("tcp://127.0.0.1:7000");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->GrpcTarget(), "127.0.0.1:7000");
  EXPECT_EQ(ParseAddress("tcp://[::1]:7000")->GrpcTarget(), "ipv6:[::1]:7000");
  EXPECT_FALSE(ParseAddress("tcp://host").ok());
  EXPECT_FALSE(ParseAddress("tcp://host:99999").ok());
  EXPECT_FALSE(ParseAddress("http://x").ok());
  EXPECT_FALSE(ParseAddress("unix://relative").ok());
}

TEST(Checksum, KnownValues) {
  // The CRC32C check value of "123456789".
  EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u);
  std::string data(100000, 'x');
  EXPECT_EQ(Checksum(ChecksumKind::kCrc32c, data.data(), data.size()),
            Crc32c(data.data(), data.size()));
  EXPECT_NE(Xxh3(data.data(), data.size()), Xxh3(data.data(), data.size() - 1));
}

TEST(Flags, ParsesValuesRepeatsAndConfig) {
  std::string name;
  std::vector<std::string> many;
  bool on = false;
  int64_t n = 3;
  Flags flags("t", "test");
  flags.String("name", &name, "");
  flags.Strings("many", &many, "");
  flags.Bool("on", &on, "");
  flags.Int("n", &n, "");
  const char *argv[] = {"t", "--name=x", "--many", "a", "--many", "b", "--on", "pos"};
  std::vector<std::string> positional;
  ASSERT_TRUE(flags.Parse(8, const_cast<char **>(argv), 1, &positional).ok());
  EXPECT_EQ(name, "x");
  EXPECT_EQ(many.size(), 2u);
  EXPECT_TRUE(on);
  EXPECT_EQ(positional, std::vector<std::string>{"pos"});
  const char *bad[] = {"t", "--nope"};
  Flags flags2("t", "test");
  EXPECT_FALSE(flags2.Parse(2, const_cast<char **>(bad), 1, &positional).ok());
}

TEST(Frame, RoundTripsAndRefusesOversize) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  std::string big(300 << 10, 'x');
  big[12345] = 'y';
  std::thread writer([&] {
    EXPECT_TRUE(WriteFrame(sv[0], 7, big).ok());
    EXPECT_TRUE(WriteFrame(sv[0], 9, "").ok());
    EXPECT_TRUE(WriteFrame(sv[0], 1, std::string(100, 'z')).ok());
  });
  uint8_t code = 0;
  std::string payload;
  ASSERT_TRUE(ReadFrame(sv[1], &code, &payload, 1 << 20).ok());
  EXPECT_EQ(code, 7);
  EXPECT_EQ(payload, big);
  ASSERT_TRUE(ReadFrame(sv[1], &code, &payload, 1 << 20).ok());
  EXPECT_EQ(code, 9);
  EXPECT_TRUE(payload.empty());
  // The caller drops a connection after EMSGSIZE: the stream is out of step.
  EXPECT_EQ(ReadFrame(sv[1], &code, &payload, 99).errnum(), EMSGSIZE);
  writer.join();
  close(sv[0]);
  close(sv[1]);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  close(sv[0]);
  EXPECT_EQ(ReadFrame(sv[1], &code, &payload, 1 << 20).errnum(), ECONNRESET);
  close(sv[1]);
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

}  // namespace
}  // namespace maru
