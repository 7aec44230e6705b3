// Path rules, sizes, clocks, addresses, checksums, flags, copies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <unordered_map>
#include <vector>

#include "util/address.h"
#include "util/cache_flush.h"
#include "util/checksum.h"
#include "util/clock.h"
#include "util/flags.h"
#include "util/flat_map.h"
#include "util/path.h"
#include "util/sorted_runs.h"
#include "util/stream_copy.h"
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

// CheckPathNames says what SplitPathViews says, and whether the path is
// already JoinPath's form (the index is keyed by that form).
TEST(Path, ChecksWithoutSplittingAndTellsTheCanonicalForm) {
  const char *paths[] = {"/a/b", "/a//b",   "/a/b/",  "//a", "/",         "",
                         "rel",  "/a/../b", "/a/./b", "/x",  "/a/b.c@d%e"};
  for (const char *path : paths) {
    SCOPED_TRACE(path);
    std::vector<std::string_view> parts;
    const Status split = SplitPathViews(path, &parts);
    size_t names = 99;
    bool canonical = true;
    const Status checked = CheckPathNames(path, &names, &canonical);
    EXPECT_EQ(checked.errnum(), split.errnum());
    if (!split.ok()) continue;
    EXPECT_EQ(names, parts.size());
    std::vector<std::string> owned(parts.begin(), parts.end());
    EXPECT_EQ(canonical, !parts.empty() && JoinPath(owned) == path);
  }
  size_t names = 0;
  EXPECT_EQ(CheckPathNames("/" + std::string(256, 'x'), &names, nullptr).errnum(), ENAMETOOLONG);
  EXPECT_EQ(CheckPathNames(std::string("/a\0b", 4), &names, nullptr).errnum(), EINVAL);
  // Name by name, as ValidateName: a long name before a NUL is too long.
  const std::string long_then_nul = "/" + std::string(256, 'x') + std::string("/a\0b", 4);
  EXPECT_EQ(CheckPathNames(long_then_nul, &names, nullptr).errnum(), ENAMETOOLONG);
  const std::string nul_then_long = std::string("/a\0b/", 5) + std::string(256, 'x');
  EXPECT_EQ(CheckPathNames(nul_then_long, &names, nullptr).errnum(), EINVAL);
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

TEST(Clock, MillisecondsBecomeNanosecondsWithoutOverflow) {
  EXPECT_EQ(MsToNs(0), 0);
  EXPECT_EQ(MsToNs(1500), 1500000000);
  EXPECT_EQ(MsToNs(-2), -2000000);
  // Capped: a client's INT64_MAX timeout added to any clock stays positive.
  EXPECT_GT(MonotonicNs() + MsToNs(INT64_MAX), MonotonicNs());
  EXPECT_LT(RealtimeNs() + MsToNs(INT64_MIN), RealtimeNs());
  EXPECT_EQ(MsToNs(INT64_MAX), -MsToNs(INT64_MIN));
}

TEST(Clock, DeadlinesInThePastHavePassedAndFarOnesHaveNot) {
  EXPECT_TRUE(DeadlinePassed(DeadlineAfterMs(-1)));
  EXPECT_FALSE(DeadlinePassed(DeadlineAfterMs(INT64_MAX)));
  const int64_t a = MonotonicMs(), b = MonotonicMs();
  EXPECT_LE(a, b);  // monotonic: never backwards
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

// Random inserts and erases, mostly at the end as eviction orders see them,
// checked against std::set after every step; small runs to split and merge
// often.
// Keys that collide in their home slot (multiples of a power of two) and
// removals in the middle of probe runs, against std::unordered_map.
TEST(FlatMap, MatchesStdUnorderedMap) {
  std::mt19937_64 rng(11);
  FlatMap<uint64_t> map;
  std::unordered_map<uint64_t, uint64_t> want;
  for (int step = 0; step < 50000; ++step) {
    const uint64_t key = 1 + (rng() % 3000) * (step % 2 ? 1 : 4096);
    const int op = static_cast<int>(rng() % 3);
    if (op == 0) {
      auto [v, made] = map.try_emplace(key, step);
      auto [it, want_made] = want.try_emplace(key, step);
      ASSERT_EQ(made, want_made);
      ASSERT_EQ(*v, it->second);
    } else if (op == 1) {
      ASSERT_EQ(map.erase(key), want.erase(key));
    } else {
      const uint64_t *v = map.find(key);
      auto it = want.find(key);
      ASSERT_EQ(v != nullptr, it != want.end());
      if (v) {
        ASSERT_EQ(*v, it->second);
      }
    }
    ASSERT_EQ(map.size(), want.size());
  }
  for (const auto &[k, v] : want) ASSERT_TRUE(map.find(k) && *map.find(k) == v);
  EXPECT_EQ(map.find(0), nullptr);
}

TEST(SortedRuns, MatchesStdSet) {
  std::mt19937_64 rng(7);
  SortedRuns<std::pair<uint64_t, uint64_t>, 8> runs;
  std::set<std::pair<uint64_t, uint64_t>> want;
  uint64_t clock = 0;
  for (int step = 0; step < 20000; ++step) {
    const int op = static_cast<int>(rng() % 10);
    if (op < 4) {
      std::pair<uint64_t, uint64_t> v{++clock, rng() % 64};
      ASSERT_EQ(runs.insert(v), want.insert(v).second);
    } else if (op < 6) {
      std::pair<uint64_t, uint64_t> v{rng() % (clock + 1), rng() % 64};
      ASSERT_EQ(runs.insert(v), want.insert(v).second);
    } else if (!want.empty()) {
      auto it = want.begin();
      std::advance(it, op < 8 ? 0 : static_cast<long>(rng() % want.size()));
      const auto v = *it;
      ASSERT_EQ(runs.erase(v), 1u);
      want.erase(v);
      ASSERT_EQ(runs.erase(v), 0u);
    }
    ASSERT_EQ(runs.size(), want.size());
    if (step % 97) continue;
    std::vector<std::pair<uint64_t, uint64_t>> got;
    runs.ForEach([&](const std::pair<uint64_t, uint64_t> &v) {
      got.push_back(v);
      return true;
    });
    const std::vector<std::pair<uint64_t, uint64_t>> expected(want.begin(), want.end());
    ASSERT_EQ(got, expected);
  }
}

// Streamed copies (past kStreamCopyMin) copy exactly the bytes asked, from
// and to any alignment, and nothing beside them; small ones are memcpy.
TEST(StreamCopy, CopiesExactlyTheRangeAtAnyAlignment) {
  const size_t sizes[] = {0,
                          1,
                          63,
                          4096,
                          kStreamCopyMin - 1,
                          kStreamCopyMin,
                          kStreamCopyMin + 4 * 4096 + 65,
                          3 * kStreamCopyMin + 17};
  std::vector<uint8_t> src(3 * kStreamCopyMin + 256), dst(src.size() + 256);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + i / 251);
  for (size_t n : sizes)
    for (size_t src_off : {0, 1, 33})
      for (size_t dst_off : {0, 5, 64}) {
        std::fill(dst.begin(), dst.end(), 0xa5);
        StreamCopy(dst.data() + dst_off, src.data() + src_off, n);
        ASSERT_EQ(memcmp(dst.data() + dst_off, src.data() + src_off, n), 0)
            << n << " bytes, src+" << src_off << ", dst+" << dst_off;
        for (size_t i = 0; i < dst_off; ++i) ASSERT_EQ(dst[i], 0xa5) << "before, " << n;
        for (size_t i = dst_off + n; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xa5) << "after, " << n;
      }
}

// Flushing and invalidating move lines between the caches and memory;
// they never change the bytes, whatever the range's alignment.
TEST(CacheFlush, KeepsTheBytesOfAnyRange) {
  std::vector<uint8_t> buf(4096 + 200);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 7);
  const std::string name = FlushInstruction();
  EXPECT_TRUE(name == "clwb" || name == "clflushopt" || name == "clflush") << name;
  for (size_t off : {0, 1, 63, 64, 65}) {
    for (size_t len : {0, 1, 64, 100, 4096}) {
      FlushRange(buf.data() + off, len);
      InvalidateRange(buf.data() + off, len);
    }
  }
  for (size_t i = 0; i < buf.size(); ++i) ASSERT_EQ(buf[i], static_cast<uint8_t>(i * 7)) << i;
}

}  // namespace
}  // namespace maru
