// The shared-memory index (docs/design.md, "The index in shared memory"):
// lookups, opens and releases without a message, on a real server and real
// client processes. A frozen server (SIGSTOP) proves an answer came from the
// index: by message it would time out.

#include <fcntl.h>
#include <glob.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "index_helpers.h"
#include "index_layout.h"
#include "maru_direct_internal.h"
#include "pattern.h"

namespace maru_test {
namespace {

class IndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start());
    // Default timeouts: a call that reached a frozen server by mistake
    // fails after them (slowly), and a restart is waited for.
    ASSERT_EQ(maru_connect(server_.address().c_str(), &m_), 0);
  }
  void TearDown() override {
    if (m_) maru_disconnect(m_);
  }

  TestPool pool_{32ull << 20};
  Server server_{pool_.path(), {"--session-timeout-ms", "1500", "--heartbeat-ms", "300"}};
  maru_t *m_ = nullptr;
};

// A pool without a region for the index (mkpool --index-size 0): a file.
TEST(IndexFile, TheServerPublishesItNextToThePoolWithThePoolsGroupAndBits) {
  TestPool pool_{32ull << 20, 64u << 10, "", "--index-size 0"};
  Server server_{pool_.path()};
  ASSERT_TRUE(server_.Start());
  struct stat pool, index;
  ASSERT_EQ(stat(pool_.path().c_str(), &pool), 0);
  ASSERT_EQ(stat((pool_.path() + ".index").c_str(), &index), 0);
  EXPECT_EQ(index.st_gid, pool.st_gid);
  EXPECT_EQ(index.st_mode & 07777, pool.st_mode & 0660);
  server_.Stop();  // a clean stop takes it away
  EXPECT_TRUE(maru_test::WaitFor(
      [&] { return access((pool_.path() + ".index").c_str(), F_OK) != 0; }, 5000));
}

TEST_F(IndexTest, LookupsSeeCreatesUnlinksAndEvictionsWithoutAMessage) {
  ASSERT_EQ(Store(m_, "/ix/a"), 0);
  ASSERT_EQ(Store(m_, "/ix/b"), 0);
  const char *both[] = {"/ix/a", "/ix/b", "/ix/none"};
  {
    Frozen frozen(server_);
    ASSERT_TRUE(frozen.ok());
    maru_chunk_t *c = nullptr;
    ASSERT_EQ(maru_open(m_, "/ix/./a", &c), -EINVAL);  // "." is no name, as by message
    ASSERT_EQ(maru_open(m_, "/ix//a", &c), 0);
    EXPECT_TRUE(maru_test::CheckPattern(maru_chunk_data(c), kSize, "/ix/a"));
    EXPECT_EQ(maru_lease_check(c), 0);
    EXPECT_EQ(maru_release(c), 0);
    maru_chunk_t *out[3];
    size_t hits = 9;
    ASSERT_EQ(maru_lookup_prefix(m_, both, 3, out, &hits), 0);  // the miss ends it, locally
    ASSERT_EQ(hits, 2u);
    EXPECT_TRUE(maru_test::CheckPattern(maru_chunk_data(out[1]), kSize, "/ix/b"));
    for (size_t i = 0; i < hits; ++i) maru_release(out[i]);
    size_t count = 9;
    ASSERT_EQ(maru_count_prefix(m_, both, 3, &count), 0);
    EXPECT_EQ(count, 2u);
  }
  ASSERT_EQ(maru_unlink(m_, "/ix/a"), 0);
  maru_chunk_t *c = nullptr;
  EXPECT_EQ(maru_open(m_, "/ix/a", &c), -ENOENT);
  {
    Frozen frozen(server_);
    size_t count = 9;
    ASSERT_EQ(maru_count_prefix(m_, both, 3, &count), 0);
    EXPECT_EQ(count, 0u);
  }
  // Fill the pool twice over: the early chunks go, a held one stays.
  ASSERT_EQ(maru_open(m_, "/ix/b", &c), 0);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(Store(m_, "/ix/fill" + std::to_string(i)), 0);
  {
    Frozen frozen(server_);
    const char *first[] = {"/ix/fill0"};
    size_t count = 9;
    ASSERT_EQ(maru_count_prefix(m_, first, 1, &count), 0);
    EXPECT_EQ(count, 0u);  // evicted
    const char *held[] = {"/ix/b"};
    ASSERT_EQ(maru_count_prefix(m_, held, 1, &count), 0);
    EXPECT_EQ(count, 1u);  // held in a lease slot: not a victim
  }
  EXPECT_TRUE(maru_test::CheckPattern(maru_chunk_data(c), kSize, "/ix/b"));
  EXPECT_EQ(maru_lease_check(c), 0);
  maru_release(c);
  std::string out;
  EXPECT_EQ(
      maru_test::Run(maru_test::MaructlBinary() + " fsck --server " + server_.address(), &out), 0)
      << out;
}

TEST_F(IndexTest, AReadThroughTheIndexKeepsTheExtentsOfAnUnlinkedChunk) {
  ASSERT_EQ(Store(m_, "/keep/a", 4 << 20), 0);
  maru_chunk_t *c = nullptr;
  {
    Frozen frozen(server_);
    ASSERT_EQ(maru_open(m_, "/keep/a", &c), 0);
  }
  ASSERT_EQ(maru_unlink(m_, "/keep/a"), 0);
  EXPECT_EQ(DeferredBytes(server_), 4u << 20);  // waits for the slot
  // Other chunks take the rest of the pool; none takes those bytes.
  for (int i = 0; i < 120; ++i) ASSERT_EQ(Store(m_, "/keep/f" + std::to_string(i)), 0);
  EXPECT_TRUE(maru_test::CheckPattern(maru_chunk_data(c), 4 << 20, "/keep/a"));
  EXPECT_EQ(maru_lease_check(c), 0);
  maru_release(c);
  // Released without a message: the server's housekeeping finds the slot empty.
  EXPECT_TRUE(maru_test::WaitFor([&] { return DeferredBytes(server_) == 0; }, 15000));
}

TEST_F(IndexTest, ADeadClientsSlotLeasesEndWithItsSession) {
  ASSERT_EQ(Store(m_, "/dead/a", 4 << 20), 0);
  maru_test::TempDir dir;
  const std::string out = dir.path() + "/out", go = dir.path() + "/never";
  pid_t holder =
      Spawn(maru_test::ClientCommand(server_.address(),
                                     "hold-check /dead/a " + std::to_string(4 << 20) + " " + go),
            out);
  ASSERT_TRUE(maru_test::WaitFor([&] { return ReadFile(out).find("opened") != std::string::npos; }))
      << ReadFile(out);
  ASSERT_EQ(maru_unlink(m_, "/dead/a"), 0);
  EXPECT_EQ(DeferredBytes(server_), 4u << 20);
  kill(holder, SIGKILL);
  EXPECT_EQ(maru_test::Wait(holder), 128 + SIGKILL);
  // The session times out (1.5 s), its region is emptied, the bytes go.
  EXPECT_TRUE(maru_test::WaitFor([&] { return DeferredBytes(server_) == 0; }, 15000))
      << server_.log();
}

TEST_F(IndexTest, ClientsFallBackAcrossAServerRestartThenUseTheNewIndex) {
  // About coming back, not expiry: a session timeout that a loaded 2-core
  // host cannot outlast while the client reconnects after the restart
  // (the space's grace after the restart stays short: see the end).
  maru_disconnect(m_);
  m_ = nullptr;
  server_.Stop();
  Server server(pool_.path(),
                {"--session-timeout-ms", "15000", "--heartbeat-ms", "300", "--grace-ms", "1500"});
  ASSERT_TRUE(server.Start());
  ASSERT_EQ(maru_connect(server.address().c_str(), &m_), 0);
  ASSERT_EQ(Store(m_, "/r/a"), 0);
  ASSERT_EQ(Store(m_, "/r/b"), 0);
  maru_chunk_t *a = nullptr, *b = nullptr;
  {
    Frozen frozen(server);
    ASSERT_EQ(maru_open(m_, "/r/a", &a), 0);
  }
  server.Kill9();
  ASSERT_TRUE(server.Start());
  // The old index is dead: this open goes to the server, which resumes the
  // session and renews the lease taken in a slot as a granted one.
  ASSERT_EQ(maru_open(m_, "/r/b", &b), 0);
  EXPECT_TRUE(maru_test::CheckPattern(maru_chunk_data(a), kSize, "/r/a"));
  EXPECT_EQ(maru_lease_check(a), 0);
  maru_release(b);
  {
    Frozen frozen(server);
    ASSERT_EQ(maru_open(m_, "/r/b", &b), 0);  // the new index
    EXPECT_TRUE(maru_test::CheckPattern(maru_chunk_data(b), kSize, "/r/b"));
  }
  maru_release(a);
  maru_release(b);
  // The renewed lease went back by message: nothing stays held.
  ASSERT_EQ(maru_unlink(m_, "/r/a"), 0);
  EXPECT_TRUE(maru_test::WaitFor([&] { return DeferredBytes(server) == 0; }, 15000));
  maru_disconnect(m_);  // before its server goes
  m_ = nullptr;
}

// Threads of one process take slots from free lists of their own: more
// opens than there are slots (the rest go by message), all released, and
// then every slot is still there for one thread, wherever it was freed
// (with the server stopped, only the index can answer).
TEST_F(IndexTest, ThreadsTakeAndGiveBackEverySlot) {
  constexpr int kChunks = 48, kThreads = 8, kRounds = 3;
  for (int i = 0; i < kChunks; ++i) ASSERT_EQ(Store(m_, "/th/" + std::to_string(i), 4096), 0);
  std::vector<std::vector<maru_chunk_t *>> held(kThreads);
  std::vector<int> bad(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r)
        for (int i = 0; i < kChunks; ++i) {
          const std::string path = "/th/" + std::to_string(i);
          maru_chunk_t *c = nullptr;
          if (maru_open(m_, path.c_str(), &c) != 0 ||
              !maru_test::CheckPattern(maru_chunk_data(c), 4096, path)) {
            ++bad[t];
            continue;
          }
          held[t].push_back(c);
        }
    });
  for (auto &t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(bad[t], 0) << "thread " << t;
    for (maru_chunk_t *c : held[t]) maru_release(c);
  }
  // 1008 slots: 20 opens of each chunk (960) need nearly all of them.
  Frozen frozen(server_);
  ASSERT_TRUE(frozen.ok());
  std::vector<maru_chunk_t *> again;
  for (int r = 0; r < 20; ++r)
    for (int i = 0; i < kChunks; ++i) {
      maru_chunk_t *c = nullptr;
      ASSERT_EQ(maru_open(m_, ("/th/" + std::to_string(i)).c_str(), &c), 0)
          << "open " << again.size() << " through the index";
      again.push_back(c);
    }
  for (maru_chunk_t *c : again) maru_release(c);
}

// A batched lookup takes slots only for the keys before its first miss, at
// once, and every one comes back with its release; when the slots run out
// halfway, the rest of the batch is asked of the server.
TEST_F(IndexTest, BatchedLookupsGiveBackTheSlotsTheyDidNotUse) {
  constexpr int kChunks = 48;
  std::vector<std::string> names, with_miss;
  for (int i = 0; i < kChunks; ++i) {
    names.push_back("/bl/" + std::to_string(i));
    ASSERT_EQ(Store(m_, names.back(), 4096), 0);
    with_miss.push_back(i == 10 ? "/bl/none" : names.back());
  }
  std::vector<const char *> all, missing;
  for (int i = 0; i < kChunks; ++i) {
    all.push_back(names[i].c_str());
    missing.push_back(with_miss[i].c_str());
  }
  std::vector<maru_chunk_t *> out(kChunks), held;
  size_t hits = 0;
  {
    Frozen frozen(server_);
    ASSERT_TRUE(frozen.ok());
    // 1000 slots used and released: any kept would show below.
    for (int r = 0; r < 100; ++r) {
      ASSERT_EQ(maru_lookup_prefix(m_, missing.data(), kChunks, out.data(), &hits), 0);
      ASSERT_EQ(hits, 10u);
      for (size_t i = 0; i < hits; ++i) maru_release(out[i]);
    }
    // 20 x 48 = 960 leases through the index: nearly every slot.
    for (int r = 0; r < 20; ++r) {
      ASSERT_EQ(maru_lookup_prefix(m_, all.data(), kChunks, out.data(), &hits), 0)
          << "lookup " << r << " through the index";
      ASSERT_EQ(hits, static_cast<size_t>(kChunks));
      held.insert(held.end(), out.begin(), out.end());
    }
  }
  // 48 slots are left; 28 more held, and a batch of 48 runs out at its 21st key.
  for (int i = 0; i < 28; ++i) {
    maru_chunk_t *c = nullptr;
    ASSERT_EQ(maru_open(m_, all[i], &c), 0);
    held.push_back(c);
  }
  ASSERT_EQ(maru_lookup_prefix(m_, all.data(), kChunks, out.data(), &hits), 0);
  ASSERT_EQ(hits, static_cast<size_t>(kChunks));
  for (int i = 0; i < kChunks; ++i) {
    EXPECT_TRUE(maru_test::CheckPattern(maru_chunk_data(out[i]), 4096, names[i])) << names[i];
    EXPECT_EQ(maru_lease_check(out[i]), 0);
    maru_release(out[i]);
  }
  for (maru_chunk_t *c : held) maru_release(c);
}

// maru_release_batch() gives every kind of handle back as maru_release()
// would: slot leases (runs longer than one pass), leases the server granted,
// a reservation, and NULL (-EINVAL, the others released all the same).
TEST_F(IndexTest, ABatchReleaseGivesBackSlotsLeasesAndReservations) {
  constexpr size_t kChunks = 100;
  std::vector<std::string> names;
  std::vector<const char *> paths;
  for (size_t i = 0; i < kChunks; ++i) names.push_back("/rb/" + std::to_string(i));
  for (const std::string &name : names) {
    ASSERT_EQ(Store(m_, name, 4096), 0);
    paths.push_back(name.c_str());
  }
  std::vector<maru_chunk_t *> out(kChunks);
  std::vector<int> results(2 * kChunks + 2, 99);
  size_t hits = 0;
  {
    Frozen frozen(server_);
    ASSERT_TRUE(frozen.ok());
    // 2500 slot leases against 1008 slots: one not given back would show.
    for (int r = 0; r < 25; ++r) {
      ASSERT_EQ(maru_lookup_prefix(m_, paths.data(), kChunks, out.data(), &hits), 0)
          << "lookup " << r << " through the index";
      ASSERT_EQ(hits, kChunks);
      ASSERT_EQ(maru_release_batch(out.data(), kChunks, results.data()), 0);
      for (size_t i = 0; i < kChunks; ++i) ASSERT_EQ(results[i], 0) << i;
    }
  }
  setenv("MARU_INDEX", "0", 1);
  maru_t *by_message = nullptr;
  const int connected = maru_connect(server_.address().c_str(), &by_message);
  unsetenv("MARU_INDEX");
  ASSERT_EQ(connected, 0);
  std::vector<maru_chunk_t *> granted(kChunks);
  ASSERT_EQ(maru_lookup_prefix(m_, paths.data(), kChunks, out.data(), &hits), 0);
  ASSERT_EQ(hits, kChunks);
  ASSERT_EQ(maru_lookup_prefix(by_message, paths.data(), kChunks, granted.data(), &hits), 0);
  ASSERT_EQ(hits, kChunks);
  maru_chunk_t *writing = nullptr;
  ASSERT_EQ(maru_create(m_, "/rb/w", 4096, &writing), 0);
  // Runs of each kind, cut by a NULL and the reservation.
  std::vector<maru_chunk_t *> all(out.begin(), out.begin() + kChunks / 2);
  all.insert(all.end(), granted.begin(), granted.begin() + kChunks / 2);
  all.push_back(nullptr);
  all.push_back(writing);
  all.insert(all.end(), out.begin() + kChunks / 2, out.end());
  all.insert(all.end(), granted.begin() + kChunks / 2, granted.end());
  ASSERT_EQ(maru_release_batch(all.data(), all.size(), results.data()), -EINVAL);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(results[i], all[i] ? 0 : -EINVAL) << i;
  // The reservation is gone: the path can be created again.
  ASSERT_EQ(maru_create(m_, "/rb/w", 4096, &writing), 0);
  EXPECT_EQ(maru_release_batch(&writing, 1, nullptr), 0);
  EXPECT_EQ(maru_release_batch(nullptr, 0, nullptr), 0);
  EXPECT_EQ(maru_release_batch(nullptr, 1, nullptr), -EINVAL);
  // No lease is left (the session that was granted some still open): once
  // their releases reach the server, an unlink frees the bytes at once.
  for (const std::string &name : names) ASSERT_EQ(maru_unlink(m_, name.c_str()), 0);
  EXPECT_TRUE(maru_test::WaitFor([&] { return DeferredBytes(server_) == 0; }, 15000));
  maru_disconnect(by_message);
}

// A batched lookup hashes its paths as given and checks only those the
// index did not find; its answers are still the server's, path for path: a
// bad path anywhere fails the whole call (and leaves nothing leased), one
// in another form than the index's is found in its canonical form.
TEST_F(IndexTest, ABatchAnswersAsTheServerWhicheverPathsTheIndexFinds) {
  for (const char *name : {"/pc/a", "/pc/b", "/pc/c"}) ASSERT_EQ(Store(m_, name, 4096), 0);
  setenv("MARU_INDEX", "0", 1);
  maru_t *by_message = nullptr;
  const int connected = maru_connect(server_.address().c_str(), &by_message);
  unsetenv("MARU_INDEX");
  ASSERT_EQ(connected, 0);
  const std::string long_name(300, 'n'), long_path = "/pc/" + std::string(5000, 'p');
  const std::string past_name = "/pc/" + long_name;
  const std::vector<std::vector<const char *>> batches = {
      {"/pc/a", "/pc/b", "/pc/c"},
      {"/pc/a", "//pc//b", "/pc/c/"},     // found in canonical form
      {"/pc/a", "/pc/b", "/pc/./c"},      // a bad path after two hits
      {"/pc/a", "/pc/none", "/pc/../c"},  // ... and past a miss
      {"/pc/a", nullptr},
      {"/pc/a", "pc/b"},
      {"/pc/a", long_path.c_str()},
      {"/pc/a", past_name.c_str()},
      {"/pc/a", "/pc/b", "/pc/none", "/pc/c"},
  };
  struct Answer {
    int rc;
    size_t hits;
  };
  auto look_up = [](maru_t *m, const std::vector<const char *> &paths) {
    std::vector<maru_chunk_t *> out(paths.size(), reinterpret_cast<maru_chunk_t *>(1));
    size_t hits = 99;
    const int rc = maru_lookup_prefix(m, paths.data(), paths.size(), out.data(), &hits);
    for (size_t i = 0; i < paths.size(); ++i) {
      if (i < hits) {
        EXPECT_NE(out[i], nullptr);
        EXPECT_TRUE(
            maru_test::CheckPattern(maru_chunk_data(out[i]), 4096, std::string("/pc/") + "abc"[i]));
        maru_release(out[i]);
      } else {
        EXPECT_EQ(out[i], nullptr) << "key " << i;  // a failed call leaves nothing
      }
    }
    return Answer{rc, hits};
  };
  std::vector<Answer> expected;
  for (const auto &batch : batches) expected.push_back(look_up(by_message, batch));
  maru_disconnect(by_message);
  EXPECT_EQ(expected[1].hits, 3u);
  EXPECT_EQ(expected[2].rc, -EINVAL);
  EXPECT_EQ(expected[6].rc, -ENAMETOOLONG);
  EXPECT_EQ(expected[7].rc, -ENAMETOOLONG);
  EXPECT_EQ(expected[8].hits, 2u);
  {
    Frozen frozen(server_);  // every answer below comes from the index
    ASSERT_TRUE(frozen.ok());
    for (size_t b = 0; b < batches.size(); ++b) {
      // Twice: a leftover lease or slot would show as a wrong second answer.
      for (int round = 0; round < 2; ++round) {
        const Answer got = look_up(m_, batches[b]);
        EXPECT_EQ(got.rc, expected[b].rc) << "batch " << b;
        EXPECT_EQ(got.hits, expected[b].hits) << "batch " << b;
      }
    }
  }
  // Nothing stays leased: an unlink frees the bytes at once, deferring none.
  for (const char *name : {"/pc/a", "/pc/b", "/pc/c"}) ASSERT_EQ(maru_unlink(m_, name), 0);
  EXPECT_EQ(DeferredBytes(server_), 0u);
}

// Another uid that may map the pool (it is in the pool's group) reads the
// index, but gets from it only what the server would give it.
TEST_F(IndexTest, AChunkYouMayNotOpenYouCannotLookUp) {
  std::string made;
  ASSERT_EQ(maru_test::Run(maru_test::BinDir("tests/probe_client") + " " + server_.address() +
                               " mkdir /closed 700",
                           &made),
            0)
      << made;
  ASSERT_EQ(Store(m_, "/closed/x"), 0);
  ASSERT_EQ(Store(m_, "/open/secret", kSize, 0600), 0);
  ASSERT_EQ(Store(m_, "/open/public", kSize, 0644), 0);
  struct stat pool;
  ASSERT_EQ(stat(pool_.path().c_str(), &pool), 0);
  const std::string as_user =
      "setpriv --reuid=1000 --regid=1000 --groups=" + std::to_string(pool.st_gid) + " ";
  const std::string size = std::to_string(kSize);
  auto run = [&](const std::string &env, const std::string &script) {
    std::string out;
    int rc =
        maru_test::Run(env + as_user + maru_test::ClientCommand(server_.address(), script), &out);
    return rc == 0 ? std::string() : out + " (exit " + std::to_string(rc) + ")";
  };
  for (const std::string env : {"", "MARU_INDEX=0 "}) {
    EXPECT_EQ(run(env, "load /open/public " + size + " " + pool_.path()), "") << env;
    EXPECT_EQ(run(env, "open-errno /open/secret 13"), "") << env;
    EXPECT_EQ(run(env, "open-errno /closed/x 13"), "") << env;
    EXPECT_EQ(run(env, "lookup 1 /open/public /open/secret"), "") << env;
    EXPECT_EQ(run(env, "lookup 0 /closed/x"), "") << env;
    EXPECT_EQ(run(env, "count 1 /open/public /open/secret"), "") << env;
  }
  // Through the index, without the server: the public chunk opens, the
  // secret one is refused locally.
  maru_test::TempDir dir;
  const std::string out = dir.path() + "/out", go = dir.path() + "/go";
  pid_t user = Spawn(
      "env MARU_TIMEOUT_MS=2000 MARU_RETRY_MS=2000 " + as_user +
          maru_test::ClientCommand(
              server_.address(), "connect + wait-for " + go + " + load /open/public " + size + " " +
                                     pool_.path() + " + lookup 1 /open/public /open/secret"),
      out);
  ASSERT_TRUE(maru_test::WaitFor([&] {
    return ReadFile(out).find("connected") != std::string::npos;
  })) << ReadFile(out);
  Frozen frozen(server_);
  ASSERT_TRUE(frozen.ok());
  std::ofstream(go).put('x');
  EXPECT_EQ(maru_test::Wait(user), 0) << ReadFile(out);
}

// More chunks than the index has room for: a start enters up to 7/8 of its
// entries and counts the rest as overflow without searching for room (at
// ten million chunks in the default 4Mi entries that search took 10 s of a
// start); every chunk is still found, those left out by message.
// A thread's block of read-note places belongs to one reader: a client
// that connects after another has gone (often getting its region, mapped
// at the same address) notes its reads in its own ring, and eviction sees
// them.
// A pool made with --coherence flush: the server flushes what it writes in
// the index, a client invalidates entries before it reads them and flushes
// its slots. Lookups, opens and releases still go through the index (the
// server is frozen: by message they would time out), and see changes.
TEST(IndexFlush, AFlushPoolsIndexServesLookupsOpensAndReleases) {
  TestPool pool(32ull << 20, 64u << 10, "flush");
  Server server(pool.path(), {"--session-timeout-ms", "1500", "--heartbeat-ms", "300"});
  ASSERT_TRUE(server.Start());
  maru_t *m = nullptr;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  ASSERT_EQ(Store(m, "/fx/a"), 0);
  ASSERT_EQ(Store(m, "/fx/b"), 0);
  const char *paths[] = {"/fx/a", "/fx/b", "/fx/none"};
  {
    Frozen frozen(server);
    ASSERT_TRUE(frozen.ok());
    for (int round = 0; round < 3; ++round) {
      maru_chunk_t *c = nullptr;
      ASSERT_EQ(maru_open(m, "/fx/a", &c), 0);
      EXPECT_TRUE(maru_test::CheckPattern(maru_chunk_data(c), kSize, "/fx/a"));
      EXPECT_EQ(maru_release(c), 0);
      maru_chunk_t *out[3];
      size_t hits = 9;
      ASSERT_EQ(maru_lookup_prefix(m, paths, 3, out, &hits), 0);
      ASSERT_EQ(hits, 2u);
      EXPECT_TRUE(maru_test::CheckPattern(maru_chunk_data(out[1]), kSize, "/fx/b"));
      EXPECT_EQ(maru_release_batch(out, hits, nullptr), 0);
    }
  }
  // Unlinks and a new chunk at a name change entries the client read before.
  ASSERT_EQ(maru_unlink(m, "/fx/a"), 0);
  ASSERT_EQ(maru_unlink(m, "/fx/b"), 0);
  ASSERT_EQ(Store(m, "/fx/b", kSize / 2), 0);
  {
    Frozen frozen(server);
    size_t count = 9;
    ASSERT_EQ(maru_count_prefix(m, paths, 3, &count), 0);
    EXPECT_EQ(count, 0u);
    const char *b[] = {"/fx/b"};
    ASSERT_EQ(maru_count_prefix(m, b, 1, &count), 0);
    EXPECT_EQ(count, 1u);
    maru_chunk_t *c = nullptr;
    ASSERT_EQ(maru_open(m, "/fx/b", &c), 0);
    EXPECT_EQ(maru_chunk_size(c), kSize / 2);
    EXPECT_TRUE(maru_test::CheckPattern(maru_chunk_data(c), kSize / 2, "/fx/b"));
    EXPECT_EQ(maru_release(c), 0);
  }
  // Released through the slots: the server's housekeeping finds them empty.
  EXPECT_TRUE(maru_test::WaitFor([&] { return DeferredBytes(server) == 0; }, 15000));
  maru_disconnect(m);
  std::string out;
  EXPECT_EQ(maru_test::Run(maru_test::MaructlBinary() + " fsck --server " + server.address(), &out),
            0)
      << out;
}

TEST(IndexReads, AReconnectedClientsReadsStillCountForEviction) {
  TestPool pool{16ull << 20};
  Server server{pool.path(),
                {"--eviction", "lru", "--high-watermark", "1", "--low-watermark", "1"}};
  ASSERT_TRUE(server.Start());
  constexpr uint64_t kChunk = 1 << 20;
  auto exists = [](maru_t *m, const std::string &path) {
    const char *paths[] = {path.c_str()};
    size_t n = 0;
    return maru_count_prefix(m, paths, 1, &n) == 0 && n == 1;
  };
  auto read = [](maru_t *m, const std::string &path) {
    const char *paths[] = {path.c_str()};
    maru_chunk_t *c = nullptr;
    size_t hits = 0;
    const int rc = maru_lookup_prefix(m, paths, 1, &c, &hits);
    if (hits == 1) maru_release(c);
    return rc == 0 && hits == 1;
  };
  // Rounds: the region lands where the last one was often, not always.
  for (int round = 0; round < 8; ++round) {
    maru_t *m = nullptr;
    ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
    const std::string dir = "/rr" + std::to_string(round);
    const std::string older = dir + "/older", newer = dir + "/newer";
    ASSERT_EQ(Store(m, older, kChunk), 0);
    ASSERT_EQ(Store(m, newer, kChunk), 0);
    ASSERT_TRUE(read(m, older));  // now the most recently used of the two
    // Fill until one of them goes: the one not read.
    for (int i = 0; exists(m, older) && exists(m, newer); ++i) {
      ASSERT_LT(i, 64) << "the pool never evicted";
      ASSERT_EQ(Store(m, dir + "/fill" + std::to_string(i), kChunk), 0);
    }
    EXPECT_TRUE(exists(m, older)) << "round " << round << ": the read was not noted";
    EXPECT_FALSE(exists(m, newer)) << "round " << round;
    maru_disconnect(m);
  }
}

TEST(IndexFull, AStartFillsSevenEighthsAndTheRestAreAskedFor) {
  TestPool pool{32ull << 20, 4u << 10, "", "--index-size 0"};
  Server server{pool.path(), {"--index-entries", "4096"}};
  ASSERT_TRUE(server.Start());
  maru_t *m = nullptr;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  constexpr int kChunks = 4000;  // 4096 / 8 * 7 = 3584 entered
  for (int i = 0; i < kChunks; ++i) ASSERT_EQ(Store(m, "/full/c" + std::to_string(i), 4096), 0);
  maru_disconnect(m);
  server.Stop();
  ASSERT_TRUE(server.Start());
  int fd = open((pool.path() + ".index").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  void *base = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(base, MAP_FAILED);
  // 3584 at most are entered (a search for room also fails now and then
  // at this load: a few more may be left out).
  const uint64_t overflow = static_cast<maru::index::Header *>(base)->overflow.load();
  EXPECT_GE(overflow, uint64_t{kChunks - 3584});
  EXPECT_LE(overflow, uint64_t{kChunks - 3584 + 32});
  munmap(base, 4096);
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  for (int i = 0; i < kChunks; ++i) {
    const std::string path = "/full/c" + std::to_string(i);
    maru_chunk_t *c = nullptr;
    ASSERT_EQ(maru_open(m, path.c_str(), &c), 0) << path;
    EXPECT_TRUE(maru_test::CheckPattern(maru_chunk_data(c), 4096, path)) << path;
    maru_release(c);
  }
  maru_disconnect(m);
}

}  // namespace
}  // namespace maru_test
