// The batched, lease-free and allocate-then-publish calls of libmaru_direct
// against a real maru-server: each against the one-by-one calls, per-request
// errors, bad input, other uids, and what happens to space when writers lose
// or die.
#include <gtest/gtest.h>

#include <signal.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "maru_direct.h"
#include "maru_direct.hpp"
#include "pattern.h"
#include "store_pattern.h"

namespace {

using maru_test::CheckPattern;
using maru_test::FillPattern;
using maru_test::RunClient;
using maru_test::Server;
using maru_test::TestPool;

constexpr uint64_t kChunk = 256 << 10;

class BatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start());
    m_ = Connect();
    ASSERT_NE(m_, nullptr);
  }
  void TearDown() override {
    if (m_) maru_disconnect(m_);
  }

  maru_t *Connect(const char *instance = nullptr) {
    maru_connect_opts_t opts{instance, MARU_POPULATE_AUTO};
    maru_t *m = nullptr;
    int rc = maru_connect_ex(server_.address().c_str(), &opts, &m);
    EXPECT_EQ(rc, 0) << maru_strerror(rc);
    return m;
  }

  int Store(const std::string &path, uint64_t size = kChunk) {
    return maru_test::StorePattern(m_, path, size);
  }

  uint64_t Free() {
    maru_pool_info_t info{};
    EXPECT_EQ(maru_pool_info(m_, &info), 0);
    return info.free;
  }

  TestPool pool_{64ull << 20};
  Server server_{pool_.path(),
                 {"--session-timeout-ms", "1500", "--heartbeat-ms", "300", "--high-watermark", "1",
                  "--low-watermark", "1"}};
  maru_t *m_ = nullptr;
};

TEST_F(BatchTest, CreateAndSealBatchesMatchOneByOne) {
  ASSERT_EQ(Store("/b/exists"), 0);
  // One by one: what each request gives alone.
  maru_chunk_t *c = nullptr;
  EXPECT_EQ(maru_create(m_, "/b/exists", kChunk, &c), -EEXIST);
  EXPECT_EQ(maru_create(m_, "relative", kChunk, &c), -EINVAL);
  EXPECT_EQ(maru_create(m_, "/b/zero", 0, &c), -EINVAL);
  // The same in one batch, with good ones around them and a repeated path.
  std::vector<std::string> names = {"/b/c0",   "/b/exists", "relative", "/b/c1",
                                    "/b/zero", "/b/c0",     "/b/c2"};
  std::vector<maru_create_req_t> reqs(names.size());
  for (size_t i = 0; i < names.size(); ++i)
    reqs[i] = {names[i].c_str(), names[i] == "/b/zero" ? 0 : kChunk, nullptr, nullptr, 1};
  reqs[6].parent = "/b/c1";
  ASSERT_EQ(maru_create_batch(m_, reqs.data(), reqs.size(), nullptr), 0);
  const std::vector<int> want = {0, -EEXIST, -EINVAL, 0, -EINVAL, -EEXIST, 0};
  std::vector<maru_chunk_t *> made;
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(reqs[i].result, want[i]) << names[i];
    EXPECT_EQ(reqs[i].chunk != nullptr, want[i] == 0) << names[i];
    if (!reqs[i].chunk) continue;
    EXPECT_EQ(maru_chunk_size(reqs[i].chunk), kChunk);
    FillPattern(maru_chunk_data(reqs[i].chunk), kChunk, names[i]);
    made.push_back(reqs[i].chunk);
  }
  ASSERT_EQ(made.size(), 3u);
  // Unsealed, they are invisible, as after maru_create.
  EXPECT_EQ(maru_open(m_, "/b/c0", &c), -EBUSY);
  // A read handle in the batch is refused by itself; a repeated handle too.
  ASSERT_EQ(maru_open(m_, "/b/exists", &c), 0);
  std::vector<maru_chunk_t *> seal = {made[0], c, made[1], made[0], made[2]};
  std::vector<int> results(seal.size(), 1);
  ASSERT_EQ(maru_seal_batch(seal.data(), seal.size(), results.data()), 0);
  EXPECT_EQ(results, (std::vector<int>{0, -EINVAL, 0, -EEXIST, 0}));
  maru_release(c);
  // Another uid creates nothing in root's directory, batched or not.
  const std::string eacces = std::to_string(EACCES);
  EXPECT_EQ(RunClient(server_.address(), "uid 65534 + create-errno /b/theirs 4096 " + eacces +
                                             " + create-batch " + eacces + " /b/theirs /b/more"),
            0);
  // Sealed handles read, as after maru_seal; others open them the usual way.
  for (maru_chunk_t *h : made) {
    EXPECT_EQ(maru_seal(h), -EINVAL);  // no longer writable
    maru_release(h);
  }
  for (const char *p : {"/b/c0", "/b/c1", "/b/c2"}) {
    ASSERT_EQ(maru_open(m_, p, &c), 0) << p;
    EXPECT_TRUE(CheckPattern(maru_chunk_data(c), kChunk, p)) << p;
    maru_release(c);
  }
}

TEST_F(BatchTest, CountPrefixCountsWhatLookupPrefixFindsWithoutLeases) {
  for (const char *p : {"/cp/0", "/cp/1", "/cp/2", "/cp/4"}) ASSERT_EQ(Store(p), 0);
  maru_chunk_t *w;
  ASSERT_EQ(maru_create(m_, "/cp/writing", kChunk, &w), 0);
  const char *paths[] = {"/cp/0", "/cp/1", "/cp/2", "/cp/3", "/cp/4"};
  size_t count = 99, hits = 0;
  ASSERT_EQ(maru_count_prefix(m_, paths, 5, &count), 0);
  maru_chunk_t *out[5];
  ASSERT_EQ(maru_lookup_prefix(m_, paths, 5, out, &hits), 0);
  EXPECT_EQ(count, 3u);
  EXPECT_EQ(count, hits);
  for (size_t i = 0; i < hits; ++i) maru_release(out[i]);
  const char *unsealed[] = {"/cp/0", "/cp/writing"};
  ASSERT_EQ(maru_count_prefix(m_, unsealed, 2, &count), 0);
  EXPECT_EQ(count, 1u);
  maru_release(w);
  // No lease: a counted chunk is unlinked and its space is back at once.
  const uint64_t before = Free();
  ASSERT_EQ(maru_count_prefix(m_, paths, 3, &count), 0);
  ASSERT_EQ(maru_unlink(m_, "/cp/0"), 0);
  EXPECT_EQ(Free(), before + kChunk);
  // Another uid counts only what it may read.
  maru_create_opts_t secret{};
  secret.mode = 0600;
  ASSERT_EQ(maru_create_ex(m_, "/cp/private", kChunk, &secret, &w), 0);
  ASSERT_EQ(maru_seal(w), 0);
  maru_release(w);
  EXPECT_EQ(RunClient(server_.address(), "uid 65534 + count 1 /cp/1 /cp/private /cp/2"), 0);
  EXPECT_EQ(RunClient(server_.address(), "count 3 /cp/1 /cp/private /cp/2"), 0);
}

TEST_F(BatchTest, PinUnpinAndUnlinkBatchesReportEachPath) {
  for (const char *p : {"/pb/a", "/pb/b", "/pb/c"}) ASSERT_EQ(Store(p), 0);
  const char *paths[] = {"/pb/a", "/pb/missing", "/pb/b", "/pb/a", "bad", "/pb/c"};
  std::vector<int> results(6, 1);
  ASSERT_EQ(maru_pin_batch(m_, paths, 6, 0, results.data()), 0);
  EXPECT_EQ(results, (std::vector<int>{0, -ENOENT, 0, -EEXIST, -EINVAL, 0}));
  // Pinned ones are not evictable: maructl evict of one fails.
  std::string out;
  EXPECT_NE(maru_test::Run(
                maru_test::MaructlBinary() + " evict /pb/b --server " + server_.address() + " 2>&1",
                &out),
            0)
      << out;
  ASSERT_EQ(maru_unpin_batch(m_, paths, 6, results.data()), 0);
  EXPECT_EQ(results, (std::vector<int>{0, -ENOENT, 0, -EEXIST, -EINVAL, 0}));
  EXPECT_EQ(maru_test::Run(
                maru_test::MaructlBinary() + " evict /pb/b --server " + server_.address() + " 2>&1",
                &out),
            0)
      << out;
  // Another uid may not unlink in root's directory, batched or not.
  const std::string eacces = std::to_string(EACCES);
  EXPECT_EQ(RunClient(server_.address(), "uid 65534 + unlink-errno /pb/a " + eacces +
                                             " + unlink-batch " + eacces + " /pb/a /pb/c"),
            0);
  maru_create_opts_t secret{};
  secret.mode = 0600;
  maru_chunk_t *w;
  ASSERT_EQ(maru_create_ex(m_, "/pb/private", kChunk, &secret, &w), 0);
  ASSERT_EQ(maru_seal(w), 0);
  maru_release(w);
  EXPECT_EQ(RunClient(server_.address(), "uid 65534 + pin-batch " + eacces + " /pb/private"), 0);
  ASSERT_EQ(maru_unlink_batch(m_, paths, 6, results.data()), 0);
  EXPECT_EQ(results, (std::vector<int>{0, -ENOENT, -ENOENT, -EEXIST, -EINVAL, 0}));
  maru_chunk_t *c;
  EXPECT_EQ(maru_open(m_, "/pb/a", &c), -ENOENT);
  EXPECT_EQ(maru_open(m_, "/pb/c", &c), -ENOENT);
}

TEST_F(BatchTest, BadInputIsRefusedWholeBeforeAnyWork) {
  const char *one[] = {"/x"};
  int results[1];
  size_t count;
  maru_create_req_t req{"/x", kChunk, nullptr, nullptr, 0};
  maru_chunk_t *c = nullptr;
  // NULL pointers.
  EXPECT_EQ(maru_create_batch(nullptr, &req, 1, nullptr), -EINVAL);
  EXPECT_EQ(maru_create_batch(m_, nullptr, 1, nullptr), -EINVAL);
  EXPECT_EQ(maru_seal_batch(nullptr, 1, results), -EINVAL);
  EXPECT_EQ(maru_count_prefix(m_, one, 1, nullptr), -EINVAL);
  EXPECT_EQ(maru_count_prefix(m_, nullptr, 1, &count), -EINVAL);
  EXPECT_EQ(maru_pin_batch(m_, one, 1, 0, nullptr), -EINVAL);
  EXPECT_EQ(maru_unpin_batch(nullptr, one, 1, results), -EINVAL);
  EXPECT_EQ(maru_unlink_batch(m_, nullptr, 1, results), -EINVAL);
  EXPECT_EQ(maru_alloc(m_, kChunk, nullptr, nullptr), -EINVAL);
  EXPECT_EQ(maru_alloc(m_, 0, nullptr, &c), -EINVAL);
  EXPECT_EQ(maru_publish(nullptr, "/x", nullptr), -EINVAL);
  EXPECT_EQ(maru_pool_regions(m_, nullptr, 1, &count), -EINVAL);
  maru_chunk_t *null_chunk[] = {nullptr};
  EXPECT_EQ(maru_seal_batch(null_chunk, 1, results), -EINVAL);
  // n == 0: nothing happens, and that is success.
  EXPECT_EQ(maru_create_batch(m_, nullptr, 0, nullptr), 0);
  EXPECT_EQ(maru_seal_batch(nullptr, 0, nullptr), 0);
  EXPECT_EQ(maru_count_prefix(m_, nullptr, 0, &count), 0);
  EXPECT_EQ(count, 0u);
  EXPECT_EQ(maru_pin_batch(m_, nullptr, 0, 0, nullptr), 0);
  EXPECT_EQ(maru_unlink_batch(m_, nullptr, 0, nullptr), 0);
  // More than MARU_BATCH_MAX.
  const size_t big = MARU_BATCH_MAX + 1;
  std::vector<const char *> paths(big, "/x");
  std::vector<int> many(big);
  std::vector<maru_create_req_t> reqs(big, req);
  std::vector<maru_chunk_t *> chunks(big, nullptr);
  EXPECT_EQ(maru_create_batch(m_, reqs.data(), big, nullptr), -E2BIG);
  EXPECT_EQ(maru_seal_batch(chunks.data(), big, many.data()), -E2BIG);
  EXPECT_EQ(maru_count_prefix(m_, paths.data(), big, &count), -E2BIG);
  EXPECT_EQ(maru_pin_batch(m_, paths.data(), big, 0, many.data()), -E2BIG);
  EXPECT_EQ(maru_unpin_batch(m_, paths.data(), big, many.data()), -E2BIG);
  EXPECT_EQ(maru_unlink_batch(m_, paths.data(), big, many.data()), -E2BIG);
  EXPECT_EQ(maru_open(m_, "/x", &c), -ENOENT);  // nothing was created
  // Exactly MARU_BATCH_MAX is fine.
  EXPECT_EQ(maru_count_prefix(m_, paths.data(), MARU_BATCH_MAX, &count), 0);
  // Unknown create flags.
  maru_create_opts_t opts{};
  opts.flags = 0x80;
  EXPECT_EQ(maru_create_batch(m_, &req, 1, &opts), -EINVAL);
  EXPECT_EQ(maru_alloc(m_, kChunk, &opts, &c), -EINVAL);
}

TEST_F(BatchTest, ContiguousChunksLieInsideAPoolRegion) {
  size_t count = 0;
  ASSERT_EQ(maru_pool_regions(m_, nullptr, 0, &count), 0);
  ASSERT_EQ(count, 1u);
  maru_region_t region;
  ASSERT_EQ(maru_pool_regions(m_, &region, 1, &count), 0);
  EXPECT_TRUE(maru_test::MappedFrom(region.base, region.length, pool_.path()));
  auto inside = [&](maru_chunk_t *c) {
    auto *p = static_cast<uint8_t *>(maru_chunk_data(c));
    auto *base = static_cast<uint8_t *>(region.base);
    return p >= base && p + maru_chunk_size(c) <= base + region.length;
  };
  // Fragment the pool: 1 MiB chunks everywhere, then every other one gone.
  std::vector<std::string> fill;
  const uint64_t fits = Free() >> 20;
  for (uint64_t i = 0; i < fits; ++i) {
    fill.push_back("/frag/" + std::to_string(i));
    ASSERT_EQ(Store(fill.back(), 1 << 20), 0);
  }
  ASSERT_GT(fill.size(), 8u);
  for (size_t i = 0; i < fill.size(); i += 2) ASSERT_EQ(maru_unlink(m_, fill[i].c_str()), 0);
  maru_create_opts_t contiguous{};
  contiguous.flags = MARU_CREATE_CONTIGUOUS;
  maru_chunk_t *c;
  // Free space enough, but no run of 2 MiB: contiguous fails, split works.
  EXPECT_EQ(maru_create_ex(m_, "/frag/big", 2 << 20, &contiguous, &c), -ENOSPC);
  EXPECT_EQ(maru_alloc(m_, 2 << 20, &contiguous, &c), -ENOSPC);
  ASSERT_EQ(maru_create_ex(m_, "/frag/big", 2 << 20, nullptr, &c), 0);
  EXPECT_FALSE(inside(c));  // a private view of two extents
  maru_release(c);
  // Contiguous chunks that fit, batched or allocated, are in the region.
  std::vector<std::string> names;
  for (int i = 0; i < 6; ++i) names.push_back("/contig/" + std::to_string(i));
  std::vector<maru_create_req_t> reqs;
  for (const std::string &n : names) reqs.push_back({n.c_str(), 1 << 20, nullptr, nullptr, 0});
  ASSERT_EQ(maru_create_batch(m_, reqs.data(), reqs.size(), &contiguous), 0);
  std::vector<maru_chunk_t *> chunks;
  for (auto &r : reqs) {
    ASSERT_EQ(r.result, 0) << r.path;
    EXPECT_TRUE(inside(r.chunk)) << r.path;
    chunks.push_back(r.chunk);
  }
  ASSERT_EQ(maru_alloc(m_, 1 << 20, &contiguous, &c), 0);
  EXPECT_TRUE(inside(c));
  chunks.push_back(c);
  for (maru_chunk_t *h : chunks) maru_release(h);
}

TEST_F(BatchTest, InstanceNameIsShownBySessions) {
  maru_t *named = Connect("vllm-test-0");
  ASSERT_NE(named, nullptr);
  std::string out;
  ASSERT_EQ(
      maru_test::Run(maru_test::MaructlBinary() + " sessions --json --server " + server_.address(),
                     &out),
      0)
      << out;
  EXPECT_NE(out.find("\"instance\":\"vllm-test-0\""), std::string::npos) << out;
  maru_disconnect(named);
  const std::string too_long(65, 'x');
  maru_connect_opts_t opts{too_long.c_str(), MARU_POPULATE_AUTO};
  maru_t *m = nullptr;
  EXPECT_EQ(maru_connect_ex(server_.address().c_str(), &opts, &m), -ENAMETOOLONG);
  EXPECT_EQ(m, nullptr);
  const std::string longest(64, 'y');
  opts.instance = longest.c_str();
  ASSERT_EQ(maru_connect_ex(server_.address().c_str(), &opts, &m), 0);
  maru_disconnect(m);
  opts.instance = "bad\nname";  // shown by tools and in metric labels
  EXPECT_EQ(maru_connect_ex(server_.address().c_str(), &opts, &m), -EINVAL);
  EXPECT_EQ(maru_connect_ex(server_.address().c_str(), nullptr, &m), 0);
  maru_disconnect(m);
}

TEST_F(BatchTest, AllocThenPublishFirstWriterWinsAndTheLoserKeepsItsSpaceUntilReleased) {
  const uint64_t before = Free();
  maru_t *other = Connect();
  ASSERT_NE(other, nullptr);
  maru_chunk_t *a = nullptr, *b = nullptr;
  ASSERT_EQ(maru_alloc(m_, kChunk, nullptr, &a), 0);
  ASSERT_EQ(maru_alloc(other, kChunk, nullptr, &b), 0);
  EXPECT_EQ(Free(), before - 2 * kChunk);
  FillPattern(maru_chunk_data(a), kChunk, "a");
  FillPattern(maru_chunk_data(b), kChunk, "b");
  EXPECT_EQ(maru_seal(a), -EINVAL);  // an allocation is published, not sealed
  int rc_a = 1, rc_b = 1;
  std::thread ta([&] { rc_a = maru_publish(a, "/race/key", nullptr); });
  std::thread tb([&] { rc_b = maru_publish(b, "/race/key", nullptr); });
  ta.join();
  tb.join();
  ASSERT_TRUE((rc_a == 0 && rc_b == -EEXIST) || (rc_a == -EEXIST && rc_b == 0))
      << rc_a << " " << rc_b;
  // The winner's chunk holds the winner's bytes. The loser keeps its space,
  // its bytes and its pointer (its views may still be in use): nothing else
  // is given that space until it lets go, and it may publish it elsewhere.
  EXPECT_EQ(Free(), before - 2 * kChunk);
  maru_chunk_t *c;
  ASSERT_EQ(maru_open(m_, "/race/key", &c), 0);
  EXPECT_TRUE(CheckPattern(maru_chunk_data(c), kChunk, rc_a == 0 ? "a" : "b"));
  maru_release(c);
  maru_chunk_t *winner = rc_a == 0 ? a : b, *loser = rc_a == 0 ? b : a;
  EXPECT_TRUE(CheckPattern(maru_chunk_data(winner), kChunk, rc_a == 0 ? "a" : "b"));
  EXPECT_EQ(maru_publish(winner, "/race/again", nullptr), -EINVAL);  // twice
  maru_chunk_t *next = nullptr;  // a new allocation lies elsewhere
  ASSERT_EQ(maru_alloc(m_, kChunk, nullptr, &next), 0);
  FillPattern(maru_chunk_data(next), kChunk, "next");
  EXPECT_TRUE(CheckPattern(maru_chunk_data(loser), kChunk, rc_a == 0 ? "b" : "a"));
  maru_release(next);
  EXPECT_EQ(maru_publish(loser, "/race/elsewhere", nullptr), 0);
  EXPECT_EQ(maru_release(a), 0);
  EXPECT_EQ(maru_release(b), 0);
  maru_disconnect(other);
  EXPECT_EQ(Free(), before - 2 * kChunk);  // both published now
  ASSERT_EQ(maru_open(m_, "/race/elsewhere", &c), 0);
  EXPECT_TRUE(CheckPattern(maru_chunk_data(c), kChunk, rc_a == 0 ? "b" : "a"));
  maru_release(c);
  ASSERT_EQ(maru_unlink(m_, "/race/elsewhere"), 0);
  EXPECT_EQ(Free(), before - kChunk);
  // A handle from maru_create is not an allocation.
  ASSERT_EQ(maru_create(m_, "/race/created", kChunk, &c), 0);
  EXPECT_EQ(maru_publish(c, "/race/other", nullptr), -EINVAL);
  maru_release(c);
  // Released unpublished, an allocation gives its space back.
  ASSERT_EQ(maru_alloc(m_, kChunk, nullptr, &c), 0);
  EXPECT_EQ(Free(), before - 2 * kChunk);
  EXPECT_EQ(maru_release(c), 0);
  EXPECT_EQ(Free(), before - kChunk);
  // Published with a parent, a checksum and a mode, like maru_create_ex.
  maru_create_opts_t opts{};
  opts.mode = 0600;
  opts.checksum = MARU_CHECKSUM_XXH3;
  ASSERT_EQ(maru_alloc(m_, kChunk, &opts, &c), 0);
  FillPattern(maru_chunk_data(c), kChunk, "child");
  ASSERT_EQ(maru_publish(c, "/race/child", "/race/key"), 0);
  EXPECT_EQ(maru_verify(c), 0);
  maru_release(c);
  // Another uid publishes only where it may create; refused, it keeps its
  // allocation (released by the client), and the space comes back.
  ASSERT_EQ(Store("/taken"), 0);  // in the root, where everyone may create
  const uint64_t settled = Free();
  const std::string eacces = std::to_string(EACCES);
  EXPECT_EQ(RunClient(server_.address(), "uid 65534 + open-errno /race/child " + eacces +
                                             " + publish-errno /race/theirs " + eacces +
                                             " + publish-errno /taken " + std::to_string(EEXIST) +
                                             " + publish-errno /own 0"),
            0);
  EXPECT_EQ(Free(), settled - 65536);  // the published one, a whole unit
}

// maru_write_from() fills a chunk in pieces at any offset, streamed (past
// 4 MiB) or, with MARU_STREAM_WRITES=0, with plain copies; a reader on
// another connection sees every byte. Ranges past the chunk and sealed
// chunks are refused with nothing copied.
TEST_F(BatchTest, WriteFromFillsChunksInPiecesAndRefusesBadRanges) {
  constexpr uint64_t kBig = (6 << 20) + 24;
  std::vector<uint8_t> src(kBig);
  for (const char *stream : {"1", "0"}) {
    setenv("MARU_STREAM_WRITES", stream, 1);
    maru_t *m = Connect();
    unsetenv("MARU_STREAM_WRITES");
    ASSERT_NE(m, nullptr);
    const std::string path = std::string("/w/stream-") + stream;
    FillPattern(src.data(), kBig, path);
    maru_chunk_t *c = nullptr;
    ASSERT_EQ(maru_create(m, path.c_str(), kBig, &c), 0);
    const uint64_t cut = (4 << 20) + 3;  // the second piece starts unaligned
    ASSERT_EQ(maru_write_from(c, src.data(), 0, cut), 0);
    ASSERT_EQ(maru_write_from(c, src.data() + cut, cut, kBig - cut), 0);
    EXPECT_EQ(maru_write_from(c, src.data(), 1, kBig), -EINVAL);
    EXPECT_EQ(maru_write_from(c, src.data(), kBig + 1, 0), -EINVAL);
    EXPECT_EQ(maru_write_from(nullptr, src.data(), 0, 1), -EINVAL);
    ASSERT_EQ(maru_seal(c), 0);
    EXPECT_EQ(maru_write_from(c, src.data(), 0, 1), -EINVAL);  // sealed: immutable
    maru_release(c);
    maru_disconnect(m);

    ASSERT_EQ(maru_open(m_, path.c_str(), &c), 0);
    EXPECT_TRUE(CheckPattern(maru_chunk_data(c), kBig, path)) << "MARU_STREAM_WRITES=" << stream;
    maru_release(c);
  }
}

TEST_F(BatchTest, CppWrapperAllocatesPublishesAndCounts) {
  maru_direct::Client client;
  maru_connect_opts_t opts{"cpp-client", MARU_POPULATE_AUTO};
  ASSERT_EQ(client.Connect(server_.address().c_str(), &opts), 0);
  maru_direct::Chunk c;
  ASSERT_EQ(client.Alloc(kChunk, &c), 0);
  std::vector<uint8_t> bytes(kChunk);
  FillPattern(bytes.data(), kChunk, "/cpp/a");
  ASSERT_EQ(c.WriteFrom(bytes.data(), 0, kChunk), 0);
  ASSERT_EQ(c.Publish("/cpp/a"), 0);
  EXPECT_TRUE(CheckPattern(c.data(), kChunk, "/cpp/a"));
  size_t count = 0;
  ASSERT_EQ(client.CountPrefix({"/cpp/a", "/cpp/b"}, &count), 0);
  EXPECT_EQ(count, 1u);
}

TEST_F(BatchTest, AllocationOfAKilledProcessIsFreedAfterTheSessionTimeout) {
  const uint64_t before = Free();
  // The client checks that its allocation took space, then dies.
  std::string out;
  EXPECT_EQ(RunClient(server_.address(), "alloc-and-die 1048576", &out), 128 + SIGKILL) << out;
  EXPECT_TRUE(maru_test::WaitFor([&] { return Free() == before; }, 15000)) << Free();
}

}  // namespace
