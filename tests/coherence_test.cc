// Pools shared without hardware coherence (docs/design.md, "Coherence"):
// a pool made with --coherence flush stores and loads bit-exact through
// every way of writing, and a pool from before the setting serves as hw.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "harness.h"
#include "maru_direct.h"
#include "pattern.h"
#include "store_pattern.h"

namespace maru_test {
namespace {

std::string PoolShow(const std::string &pool, const std::string &flags = "") {
  std::string out;
  maru_test::Run(maru_test::MaructlBinary() + " pool show " + pool + " " + flags, &out);
  return out;
}

// A pool made with --coherence flush, on a real server: each way of
// storing (create and seal, a batch, alloc and publish, a streamed write)
// flushes before it publishes, each open invalidates before it reads, and
// every byte reads back as written, in this process and in another.
TEST(Coherence, AFlushPoolStoresAndLoadsBitExact) {
  TestPool pool(64ull << 20, 64u << 10, "flush");
  EXPECT_NE(PoolShow(pool.path()).find("coherence:    flush"), std::string::npos);
  EXPECT_NE(PoolShow(pool.path(), "--json").find("\"coherence\":\"flush\""), std::string::npos);
  Server server(pool.path());
  ASSERT_TRUE(server.Start());
  // Sizes that end mid-line: the last, partial line is flushed too.
  const std::string size = std::to_string((256 << 10) + 24);
  ASSERT_EQ(RunClient(server.address(), "store /f/sealed " + size + " + store-batch " + size +
                                            " /f/b0 /f/b1 /f/b2 + publish /f/published " + size),
            0);
  maru_t *m = nullptr;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  const uint64_t streamed = 4 << 20;  // large: written past the caches
  std::vector<uint8_t> src(streamed);
  FillPattern(src.data(), streamed, "/f/streamed");
  maru_create_opts_t opts{};
  opts.checksum = MARU_CHECKSUM_XXH3;
  maru_chunk_t *c = nullptr;
  ASSERT_EQ(maru_create_ex(m, "/f/streamed", streamed, &opts, &c), 0);
  ASSERT_EQ(maru_write_from(c, src.data(), 0, streamed), 0);
  ASSERT_EQ(maru_seal(c), 0);
  maru_release(c);
  const uint64_t n = std::stoull(size);
  for (const char *path : {"/f/sealed", "/f/b0", "/f/b2", "/f/published"})
    EXPECT_EQ(maru_test::LoadPattern(m, path, n, pool.path()), 0) << path;
  EXPECT_EQ(maru_test::LoadPattern(m, "/f/streamed", streamed, pool.path()), 0);
  ASSERT_EQ(maru_open(m, "/f/streamed", &c), 0);
  EXPECT_EQ(maru_verify(c), 0);
  maru_release(c);
  maru_disconnect(m);
  EXPECT_EQ(RunClient(server.address(), "load /f/b1 " + size + " " + pool.path() +
                                            " + load /f/streamed " + std::to_string(streamed) +
                                            " " + pool.path()),
            0);
}

// A pool formatted before pools named their coherence serves as before,
// as hw: the server starts on it, and stores and loads work.
TEST(Coherence, APoolFromBeforeTheSettingIsHw) {
  TestPool pool(64ull << 20, 64u << 10, "", "--index-size 0");  // no regions then either
  ASSERT_TRUE(maru_test::MakePoolPredateCoherence(pool.path()));
  EXPECT_NE(PoolShow(pool.path()).find("coherence:    hw"), std::string::npos);
  EXPECT_NE(PoolShow(pool.path(), "--json").find("\"coherence\":\"hw\""), std::string::npos);
  Server server(pool.path());
  ASSERT_TRUE(server.Start());
  EXPECT_EQ(RunClient(server.address(), "store /old/a 65536 + load /old/a 65536 " + pool.path()),
            0);
}

}  // namespace
}  // namespace maru_test
