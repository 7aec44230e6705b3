// Layer-wise chunks and async batches of libmaru_direct against a real
// maru-server: a writer process publishes parts while readers wait for
// them; a writer that aborts or dies leaves its readers -ECONNABORTED; the
// server caps waits per session; async batches report per op and through an
// eventfd.
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "maru_direct.h"
#include "pattern.h"

namespace {

using maru_test::CheckPattern;
using maru_test::FillPattern;
using maru_test::RunClient;
using maru_test::Server;
using maru_test::TestPool;

constexpr uint32_t kParts = 4;
constexpr uint64_t kPart = 64 << 10;
constexpr uint64_t kSize = kParts * kPart;

// One byte through a pipe: the two processes of a test take turns.
class Signal {
 public:
  Signal() { EXPECT_EQ(pipe(fds_), 0); }
  ~Signal() {
    close(fds_[0]);
    close(fds_[1]);
  }
  void Post() { EXPECT_EQ(write(fds_[1], "x", 1), 1); }
  bool Await() {
    char b;
    return read(fds_[0], &b, 1) == 1;
  }

 private:
  int fds_[2];
};

class LayerwiseTest : public ::testing::Test {
 protected:
  // A short session timeout: a killed writer is noticed within seconds (not so
  // short that a loaded machine expires the reader too).
  LayerwiseTest()
      : server_(pool_.path(), {"--session-timeout-ms", "2000", "--heartbeat-ms", "300"}) {}
  void SetUp() override { ASSERT_TRUE(server_.Start()); }

  // Connects; call only after the test's forks (handles do not survive one).
  maru_t *Connect() {
    maru_t *m = nullptr;
    int rc = maru_connect(server_.address().c_str(), &m);
    EXPECT_EQ(rc, 0) << maru_strerror(rc);
    return m;
  }

  // A writer process: creates `path` in kParts parts filled with its
  // pattern, posts `ready`, then for each step awaits `go` and does the
  // next of `steps`: 'p' publishes the next part, 's' seals, 'a' releases
  // without sealing, 'k' waits to be killed.
  pid_t Writer(const std::string &path, const std::string &steps, Signal *ready, Signal *go,
               uint32_t mode = 0644) {
    const std::string address = server_.address();
    return maru_test::Fork([=] {
      maru_t *m = nullptr;
      if (maru_connect(address.c_str(), &m)) return 10;
      maru_create_opts_t opts{};
      opts.parts = kParts;
      opts.mode = mode;
      maru_chunk_t *c;
      if (maru_create_ex(m, path.c_str(), kSize, &opts, &c)) return 11;
      FillPattern(maru_chunk_data(c), kSize, path);
      ready->Post();
      uint32_t next = 0;
      for (char step : steps) {
        if (!go->Await()) return 12;
        int rc = 0;
        if (step == 'p') rc = maru_publish_part(c, next++);
        if (step == 's') rc = maru_seal(c);
        if (step == 'a') rc = maru_release(c);
        if (step == 'k') pause();
        if (rc) return 13;
        ready->Post();
      }
      maru_disconnect(m);
      return 0;
    });
  }

  TestPool pool_{64ull << 20};
  Server server_;
};

// Part i of `c` holds the writer's pattern for `path`.
bool PartHolds(maru_chunk_t *c, const std::string &path, uint32_t i) {
  std::vector<uint8_t> whole(kSize), got(kPart);
  FillPattern(whole.data(), kSize, path);
  if (maru_read_into(c, got.data(), i * kPart, kPart)) return false;
  return memcmp(got.data(), whole.data() + i * kPart, kPart) == 0;
}

TEST_F(LayerwiseTest, AWaitBeforeThePublishIsWokenByIt) {
  Signal ready, go;
  const std::string path = "/lw/wake";
  pid_t writer = Writer(path, "pppps", &ready, &go);
  ASSERT_TRUE(ready.Await());
  maru_t *m = Connect();
  maru_chunk_t *r;
  ASSERT_EQ(maru_open_partial(m, path.c_str(), &r), 0);
  EXPECT_EQ(maru_chunk_parts(r), kParts);
  EXPECT_EQ(maru_chunk_size(r), kSize);
  uint8_t byte;
  for (uint32_t i = 0; i < kParts; ++i) {
    EXPECT_EQ(maru_wait_part(r, i, 0), -ETIMEDOUT);
    EXPECT_EQ(maru_read_into(r, &byte, i * kPart, 1), -EBUSY);  // not published: refused
    std::atomic<int> rc{1};
    std::thread waiter([&] { rc = maru_wait_part(r, i, -1); });
    go.Post();
    waiter.join();
    EXPECT_EQ(rc, 0);
    EXPECT_TRUE(PartHolds(r, path, i)) << "part " << i;
    ASSERT_TRUE(ready.Await());
  }
  go.Post();  // seal
  ASSERT_TRUE(ready.Await());
  EXPECT_EQ(maru_wait_part(r, kParts - 1, 0), 0);
  EXPECT_EQ(maru_lease_check(r), 0);
  maru_release(r);
  // A sealed chunk opens partial too, with every part there.
  ASSERT_EQ(maru_open_partial(m, path.c_str(), &r), 0);
  EXPECT_EQ(maru_chunk_parts(r), kParts);
  EXPECT_EQ(maru_wait_part(r, kParts - 1, 0), 0);
  EXPECT_TRUE(CheckPattern(maru_chunk_data(r), kSize, path));
  maru_release(r);
  EXPECT_EQ(maru_test::Wait(writer), 0);
  maru_disconnect(m);
}

TEST_F(LayerwiseTest, PartsOutOfRangeAreRefused) {
  maru_t *m = Connect();
  maru_create_opts_t opts{};
  opts.parts = 3;
  maru_chunk_t *c = nullptr;
  EXPECT_EQ(maru_create_ex(m, "/lw/odd", 1000, &opts, &c), -EINVAL);
  opts.parts = MARU_PARTS_MAX + 1;
  EXPECT_EQ(maru_create_ex(m, "/lw/many", 8192, &opts, &c), -EINVAL);
  opts.parts = kParts;
  ASSERT_EQ(maru_create_ex(m, "/lw/range", kSize, &opts, &c), 0);
  EXPECT_EQ(maru_publish_part(c, kParts), -EINVAL);
  EXPECT_EQ(maru_publish_part(c, 1), 0);
  EXPECT_EQ(maru_publish_part(c, 0), 0);  // already published: nothing to do
  maru_chunk_t *r;
  ASSERT_EQ(maru_open_partial(m, "/lw/range", &r), 0);
  EXPECT_EQ(maru_wait_part(r, kParts, 0), -EINVAL);
  EXPECT_EQ(maru_wait_part(r, 1, 0), 0);
  EXPECT_EQ(maru_wait_part(c, 0, 0), -EINVAL);  // a writer does not wait
  EXPECT_EQ(maru_publish_part(r, 2), -EINVAL);  // a reader does not publish
  maru_chunk_t *none = nullptr;
  EXPECT_EQ(maru_open_partial(m, "/lw/none", &none), -ENOENT);
  EXPECT_EQ(none, nullptr);
  EXPECT_EQ(maru_chunk_parts(nullptr), 0u);
  // A chunk written in one piece is one part, published by the seal.
  maru_chunk_t *one;
  ASSERT_EQ(maru_create(m, "/lw/one", kPart, &one), 0);
  EXPECT_EQ(maru_chunk_parts(one), 1u);
  maru_release(r);
  ASSERT_EQ(maru_open_partial(m, "/lw/one", &r), 0);
  EXPECT_EQ(maru_wait_part(r, 0, 0), -ETIMEDOUT);
  ASSERT_EQ(maru_seal(one), 0);
  EXPECT_EQ(maru_wait_part(r, 0, 10000), 0);
  maru_release(r);
  maru_release(one);
  maru_release(c);
  maru_disconnect(m);
}

TEST_F(LayerwiseTest, AReaderWithoutPermissionGetsEacces) {
  Signal ready, go;
  pid_t writer = Writer("/lw/private", "a", &ready, &go, 0600);
  ASSERT_TRUE(ready.Await());
  std::string out;
  EXPECT_EQ(RunClient(server_.address(),
                      "uid 65534 + open-partial-errno /lw/private " + std::to_string(EACCES), &out),
            0)
      << out;
  go.Post();
  EXPECT_EQ(maru_test::Wait(writer), 0);
}

TEST_F(LayerwiseTest, AKilledWriterLeavesReadersEconnaborted) {
  Signal ready, go;
  const std::string path = "/lw/killed";
  pid_t writer = Writer(path, "pk", &ready, &go);
  ASSERT_TRUE(ready.Await());
  go.Post();  // part 0
  ASSERT_TRUE(ready.Await());
  maru_t *m = Connect();
  maru_chunk_t *r;
  ASSERT_EQ(maru_open_partial(m, path.c_str(), &r), 0);
  ASSERT_EQ(maru_wait_part(r, 0, -1), 0);
  go.Post();  // the writer pauses; killed mid-chunk
  kill(writer, SIGKILL);
  EXPECT_EQ(maru_test::Wait(writer), 128 + SIGKILL);
  // Its session is reaped after the server's timeout; the wait ends then.
  EXPECT_EQ(maru_wait_part(r, 1, -1), -ECONNABORTED);
  EXPECT_EQ(maru_wait_part(r, 3, 0), -ECONNABORTED);
  // What was published stays readable under the lease; the rest is refused.
  EXPECT_TRUE(PartHolds(r, path, 0));
  uint8_t byte;
  EXPECT_EQ(maru_read_into(r, &byte, kPart, 1), -EBUSY);
  maru_release(r);
  maru_disconnect(m);
}

TEST_F(LayerwiseTest, AReleaseWithoutSealLeavesReadersEconnaborted) {
  Signal ready, go;
  const std::string path = "/lw/aborted";
  pid_t writer = Writer(path, "pa", &ready, &go);
  ASSERT_TRUE(ready.Await());
  go.Post();
  ASSERT_TRUE(ready.Await());
  maru_t *m = Connect();
  maru_chunk_t *r;
  ASSERT_EQ(maru_open_partial(m, path.c_str(), &r), 0);
  std::atomic<int> rc{1};
  std::thread waiter([&] { rc = maru_wait_part(r, 1, -1); });
  go.Post();  // release without seal
  waiter.join();
  EXPECT_EQ(rc, -ECONNABORTED);
  EXPECT_TRUE(PartHolds(r, path, 0));
  maru_release(r);
  EXPECT_EQ(maru_test::Wait(writer), 0);
  EXPECT_EQ(maru_open_partial(m, path.c_str(), &r), -ENOENT);  // gone with the abort
  maru_disconnect(m);
}

// The default session timeout: the writer's session must outlast the restart.
TEST(LayerwiseRestart, AServerRestartLosesPartialLeasesButNotTheWriter) {
  TestPool pool(64ull << 20);
  Server server(pool.path());
  ASSERT_TRUE(server.Start());
  maru_t *m = nullptr;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  maru_create_opts_t opts{};
  opts.parts = 2;
  maru_chunk_t *w, *r;
  ASSERT_EQ(maru_create_ex(m, "/lw/restart", 2 * kPart, &opts, &w), 0);
  FillPattern(maru_chunk_data(w), 2 * kPart, "restart");
  ASSERT_EQ(maru_publish_part(w, 0), 0);
  ASSERT_EQ(maru_open_partial(m, "/lw/restart", &r), 0);
  ASSERT_EQ(maru_wait_part(r, 0, 0), 0);
  server.Stop();
  ASSERT_TRUE(server.Start());
  // The writer's session comes back with its reservation and its parts.
  EXPECT_EQ(maru_publish_part(w, 1), 0);
  // A lease on a chunk being written is not renewed: the reader must reopen.
  EXPECT_EQ(maru_wait_part(r, 1, -1), -ESTALE);
  EXPECT_EQ(maru_wait_part(r, 0, 0), 0);  // seen published before: no question asked
  ASSERT_EQ(maru_seal(w), 0);
  maru_release(r);
  ASSERT_EQ(maru_open_partial(m, "/lw/restart", &r), 0);
  EXPECT_EQ(maru_chunk_parts(r), 2u);
  EXPECT_EQ(maru_wait_part(r, 1, 0), 0);
  EXPECT_TRUE(CheckPattern(maru_chunk_data(r), 2 * kPart, "restart"));
  maru_release(r);
  maru_release(w);
  maru_disconnect(m);
}

TEST_F(LayerwiseTest, WaitsPerSessionAreCapped) {
  maru_t *m = Connect();
  maru_create_opts_t opts{};
  opts.parts = 2;
  maru_chunk_t *w, *r;
  ASSERT_EQ(maru_create_ex(m, "/lw/cap", 2 * kPart, &opts, &w), 0);
  ASSERT_EQ(maru_open_partial(m, "/lw/cap", &r), 0);
  // The cap is the server's (PartTable::kMaxWaitersPerSession).
  constexpr int kCap = 64;
  std::vector<std::thread> waiters;
  std::atomic<int> woken{0};
  for (int i = 0; i < kCap; ++i)
    waiters.emplace_back([&] { woken += maru_wait_part(r, 0, -1) == 0; });
  // Once all of them wait at the server, one more is refused (a look with
  // timeout 0 tells, without taking a place itself).
  EXPECT_TRUE(maru_test::WaitFor([&] { return maru_wait_part(r, 0, 0) == -EMFILE; }, 60000));
  ASSERT_EQ(maru_publish_part(w, 0), 0);
  for (std::thread &t : waiters) t.join();
  EXPECT_EQ(woken, kCap);
  EXPECT_EQ(maru_wait_part(r, 0, 0), 0);
  maru_release(r);
  maru_release(w);
  maru_disconnect(m);
}

TEST_F(LayerwiseTest, AsyncBatchesReportPerOpAndThroughTheirEventfd) {
  maru_t *m = Connect();
  constexpr int kChunks = 3;
  maru_chunk_t *c[kChunks];
  std::vector<std::vector<uint8_t>> src(kChunks, std::vector<uint8_t>(kPart));
  std::vector<maru_write_op_t> writes;
  for (int i = 0; i < kChunks; ++i) {
    ASSERT_EQ(maru_create(m, ("/lw/async" + std::to_string(i)).c_str(), 2 * kPart, &c[i]), 0);
    FillPattern(src[i].data(), kPart, "src" + std::to_string(i));
    writes.push_back({c[i], src[i].data(), kPart, kPart});
  }
  writes.push_back({c[0], src[0].data(), 2 * kPart, 1});  // past the end
  int wres[kChunks + 1];
  maru_future_t *f;
  ASSERT_EQ(maru_write_from_batch_async(writes.data(), writes.size(), wres, &f), 0);
  pollfd pfd{maru_future_fd(f), POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 30000), 1);
  EXPECT_EQ(maru_future_wait(f, 0), -EINVAL);  // the first failed op's error
  EXPECT_EQ(std::vector<int>(wres, wres + kChunks + 1), (std::vector<int>{0, 0, 0, -EINVAL}));
  maru_future_free(f);
  for (maru_chunk_t *chunk : c) ASSERT_EQ(maru_seal(chunk), 0);
  EXPECT_EQ(maru_write_from_batch(writes.data(), 1), -EINVAL);  // sealed: not writable
  std::vector<std::vector<uint8_t>> dst(kChunks, std::vector<uint8_t>(kPart));
  std::vector<maru_read_op_t> reads;
  for (int i = 0; i < kChunks; ++i) reads.push_back({c[i], dst[i].data(), kPart, kPart});
  int rres[kChunks];
  ASSERT_EQ(maru_read_into_batch_async(reads.data(), reads.size(), rres, &f), 0);
  EXPECT_EQ(maru_future_wait(f, -1), 0);
  maru_future_free(f);
  for (int i = 0; i < kChunks; ++i) {
    EXPECT_EQ(rres[i], 0);
    EXPECT_EQ(dst[i], src[i]) << i;
  }
  // Nothing to do: done at once. Ops of two connections: refused whole.
  ASSERT_EQ(maru_read_into_batch_async(nullptr, 0, nullptr, &f), 0);
  EXPECT_EQ(maru_future_wait(f, 0), 0);
  maru_future_free(f);
  maru_t *other = Connect();
  maru_chunk_t *o;
  ASSERT_EQ(maru_open(other, "/lw/async0", &o), 0);
  reads[1].chunk = o;
  EXPECT_EQ(maru_read_into_batch_async(reads.data(), 2, nullptr, &f), -EINVAL);
  maru_release(o);
  maru_disconnect(other);
  for (maru_chunk_t *chunk : c) maru_release(chunk);
  maru_disconnect(m);
}

}  // namespace
