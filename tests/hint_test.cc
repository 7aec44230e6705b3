// Retention hints (maru_hint, maru_hint_batch) against a real maru-server
// with its default eviction policy: bad input, who may hint, that a hint
// reorders eviction both ways, that it never stops a full pool from
// evicting (a hint is not a pin), and that the policy's old name
// (`--eviction hinted`) still starts a server that takes them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness.h"
#include "maru_direct.h"
#include "pattern.h"
#include "store_pattern.h"

namespace {

using maru_test::FillPattern;
using maru_test::RunClient;
using maru_test::Server;
using maru_test::TestPool;

constexpr uint64_t kChunk = 8ull << 20;

class HintTest : public ::testing::Test {
 protected:
  HintTest() : HintTest({}) {}
  explicit HintTest(std::vector<std::string> policy) : server_(pool_.path(), ServerArgs(policy)) {}
  static std::vector<std::string> ServerArgs(std::vector<std::string> args) {
    for (const char *a : {"--high-watermark", "1", "--low-watermark", "1"}) args.push_back(a);
    return args;
  }
  void SetUp() override {
    ASSERT_TRUE(server_.Start());
    ASSERT_EQ(maru_connect(server_.address().c_str(), &m_), 0);
  }
  void TearDown() override {
    if (m_) maru_disconnect(m_);
  }

  int Store(const std::string &path, uint64_t size = kChunk) {
    return maru_test::StorePattern(m_, path, size);
  }
  // Whether `path` is still stored (not evicted); looks without reading,
  // which would count as a use.
  bool Stored(const std::string &path) {
    const char *p = path.c_str();
    size_t hits = 0;
    EXPECT_EQ(maru_count_prefix(m_, &p, 1, &hits), 0);
    return hits == 1;
  }

  TestPool pool_{128ull << 20};
  Server server_;
  maru_t *m_ = nullptr;
};

// The same server under the policy's name from before hints were folded
// into the default.
class HintOldNameTest : public HintTest {
 protected:
  HintOldNameTest() : HintTest({"--eviction", "hinted"}) {}
};

TEST_F(HintTest, BadInputGetsClearErrorsAndChangesNothing) {
  ASSERT_EQ(Store("/h/a", 4096), 0);
  EXPECT_EQ(maru_hint(nullptr, "/h/a", MARU_HINT_KEEP), -EINVAL);
  EXPECT_EQ(maru_hint(m_, nullptr, MARU_HINT_KEEP), -EINVAL);
  EXPECT_EQ(maru_hint(m_, "h/a", MARU_HINT_KEEP), -EINVAL);  // not absolute
  EXPECT_EQ(maru_hint(m_, "/h/a", 3), -EINVAL);
  EXPECT_EQ(maru_hint(m_, "/h/a", -1), -EINVAL);
  EXPECT_EQ(maru_hint(m_, "/h/missing", MARU_HINT_KEEP), -ENOENT);
  EXPECT_EQ(maru_hint(m_, "/h", MARU_HINT_KEEP), -EISDIR);
  // Being written: the policy orders sealed chunks only.
  maru_chunk_t *c;
  ASSERT_EQ(maru_create(m_, "/h/writing", 4096, &c), 0);
  EXPECT_EQ(maru_hint(m_, "/h/writing", MARU_HINT_KEEP), -EBUSY);
  ASSERT_EQ(maru_seal(c), 0);
  maru_release(c);
  for (int hint : {MARU_HINT_KEEP, MARU_HINT_DROP, MARU_HINT_NONE})
    EXPECT_EQ(maru_hint(m_, "/h/writing", hint), 0);

  // Batches: per-path errors, a path named twice EEXIST, whole-call errors.
  const char *paths[] = {"/h/a", "/h/missing", "/h/a", "/h", "/h/writing"};
  int results[5] = {1, 1, 1, 1, 1};
  ASSERT_EQ(maru_hint_batch(m_, paths, 5, MARU_HINT_KEEP, results), 0);
  EXPECT_EQ(results[0], 0);
  EXPECT_EQ(results[1], -ENOENT);
  EXPECT_EQ(results[2], -EEXIST);
  EXPECT_EQ(results[3], -EISDIR);
  EXPECT_EQ(results[4], 0);
  EXPECT_EQ(maru_hint_batch(m_, paths, 5, 7, results), -EINVAL);
  EXPECT_EQ(maru_hint_batch(m_, paths, 1, MARU_HINT_KEEP, nullptr), -EINVAL);
  EXPECT_EQ(maru_hint_batch(m_, nullptr, 0, MARU_HINT_KEEP, nullptr), 0);
  std::vector<const char *> many(MARU_BATCH_MAX + 1, "/h/a");
  std::vector<int> many_results(many.size());
  EXPECT_EQ(maru_hint_batch(m_, many.data(), many.size(), MARU_HINT_KEEP, many_results.data()),
            -E2BIG);
  // Nothing was lost on the way.
  EXPECT_TRUE(Stored("/h/a"));
  EXPECT_TRUE(Stored("/h/writing"));
}

TEST_F(HintTest, OnlyTheOwnerRootOrAWriterMayHint) {
  ASSERT_EQ(Store("/h/roots", 4096), 0);
  // Another uid, over the fast lane (the op is served there too): EACCES
  // on root's 0644 chunk, 0 on its own.
  EXPECT_EQ(
      RunClient(server_.address(), "uid 65534 + hint-errno /h/roots 1 " + std::to_string(EACCES) +
                                       " + hint-errno /h/roots 2 " + std::to_string(EACCES) +
                                       " + store /nobody/own 4096 + hint-errno /nobody/own 1 0" +
                                       " + hint-errno /nobody/own 9 " + std::to_string(EINVAL)),
      0);
  EXPECT_EQ(maru_hint(m_, "/nobody/own", MARU_HINT_DROP), 0);  // root may
}

TEST_F(HintTest, KeepOutlastsOlderChunksAndDropGoesFirst) {
  // Stored in this order: LRU would evict kept, dropped, then plain0...
  ASSERT_EQ(Store("/h/kept"), 0);
  ASSERT_EQ(Store("/h/dropped"), 0);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(Store("/h/plain" + std::to_string(i)), 0);
  ASSERT_EQ(maru_hint(m_, "/h/kept", MARU_HINT_KEEP), 0);
  ASSERT_EQ(maru_hint(m_, "/h/dropped", MARU_HINT_DROP), 0);
  // Fill the pool until the oldest unhinted chunk goes.
  int stored = 0;
  while (Stored("/h/plain0")) {
    ASSERT_LT(stored, 64) << "the pool never evicted";
    ASSERT_EQ(Store("/h/new" + std::to_string(stored++)), 0);
  }
  EXPECT_FALSE(Stored("/h/dropped"));  // went before it
  EXPECT_TRUE(Stored("/h/kept"));      // older, but kept
}

TEST_F(HintTest, MaructlHintsAndSaysWhichPathsFailed) {
  ASSERT_EQ(Store("/h/older"), 0);
  ASSERT_EQ(Store("/h/dropped"), 0);
  const std::string ctl = maru_test::MaructlBinary() + " hint ";
  const std::string server = " --server " + server_.address() + " 2>&1";
  std::string out;
  EXPECT_EQ(maru_test::Run(ctl + "drop /h/dropped" + server, &out), 0) << out;
  EXPECT_EQ(out, "");
  EXPECT_NE(maru_test::Run(ctl + "keep /h/older /h/missing /h" + server, &out), 0);
  EXPECT_NE(out.find("/h/missing: No such file or directory"), std::string::npos) << out;
  EXPECT_NE(out.find("/h: Is a directory"), std::string::npos) << out;
  EXPECT_NE(maru_test::Run(ctl + "forever /h/older" + server, &out), 0);
  EXPECT_NE(out.find("'forever' is not keep, drop or none"), std::string::npos) << out;
  EXPECT_NE(maru_test::Run(ctl + "drop" + server, &out), 0);
  int stored = 0;
  while (Stored("/h/dropped")) {
    ASSERT_LT(stored, 64) << "the pool never evicted";
    ASSERT_EQ(Store("/h/new" + std::to_string(stored++)), 0);
  }
  EXPECT_TRUE(Stored("/h/older"));  // kept, and LRU would have taken it first
}

TEST_F(HintOldNameTest, DropStillGoesFirst) {
  ASSERT_EQ(Store("/h/older"), 0);
  ASSERT_EQ(Store("/h/dropped"), 0);
  ASSERT_EQ(maru_hint(m_, "/h/dropped", MARU_HINT_DROP), 0);
  int stored = 0;
  while (Stored("/h/dropped")) {
    ASSERT_LT(stored, 64) << "the pool never evicted";
    ASSERT_EQ(Store("/h/new" + std::to_string(stored++)), 0);
  }
  EXPECT_TRUE(Stored("/h/older"));  // LRU would have taken it first
}

TEST_F(HintTest, AHintNeverStopsAFullPoolFromEvicting) {
  // Every chunk hinted keep, then many times the pool stored on top: each
  // store succeeds (no ENOSPC), and the kept chunks go in their turn.
  std::vector<std::string> kept;
  for (int i = 0; i < 8; ++i) {
    kept.push_back("/h/k" + std::to_string(i));
    ASSERT_EQ(Store(kept.back()), 0);
  }
  std::vector<const char *> paths;
  for (const std::string &k : kept) paths.push_back(k.c_str());
  std::vector<int> results(paths.size(), 1);
  ASSERT_EQ(maru_hint_batch(m_, paths.data(), paths.size(), MARU_HINT_KEEP, results.data()), 0);
  for (int r : results) EXPECT_EQ(r, 0);
  maru_pool_info_t info{};
  ASSERT_EQ(maru_pool_info(m_, &info), 0);
  const uint64_t capacity = info.total / kChunk;
  for (uint64_t i = 0; i < 4 * capacity; ++i) {
    ASSERT_EQ(Store("/h/n" + std::to_string(i)), 0) << "store " << i;
    // A client re-hinting keep on every store gains nothing past a bound.
    results.assign(paths.size(), 1);
    ASSERT_EQ(maru_hint_batch(m_, paths.data(), paths.size(), MARU_HINT_KEEP, results.data()), 0);
  }
  for (const std::string &k : kept) EXPECT_FALSE(Stored(k)) << k;
}

}  // namespace
