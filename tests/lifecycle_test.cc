// The pool as a cache under stress: server crashes under load, eviction
// under readers, integrity checks, pins, and the trace replay.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"
#include "maru_direct.h"
#include "pattern.h"

namespace {

using maru_test::RunClient;
using maru_test::Server;
using maru_test::SpawnClient;
using maru_test::TestPool;
using maru_test::Wait;

size_t Lines(const std::string &path) {
  std::ifstream in(path);
  size_t n = 0;
  std::string line;
  while (std::getline(in, line)) ++n;
  return n;
}

std::string Maructl(const std::string &args, int *rc = nullptr) {
  std::string out;
  int code = maru_test::Run(maru_test::MaructlBinary() + " " + args, &out);
  if (rc) *rc = code;
  return out;
}

TEST(Lifecycle, KillDashNineUnderLoadLosesNoSealedChunk) {
  TestPool pool(128ull << 20);
  Server server(pool.path(), {"--session-timeout-ms", "3000", "--heartbeat-ms", "500"});
  ASSERT_TRUE(server.Start());
  maru_test::TempDir dir;
  const std::string log = dir.path() + "/stored";
  pid_t writer = SpawnClient(server.address(), "store-log /crash 400 65536 " + log);
  pid_t churn = SpawnClient(server.address(), "churn /busy 50 65536 6");
  for (size_t round = 1; round <= 3; ++round) {
    ASSERT_TRUE(maru_test::WaitFor([&] { return Lines(log) >= round * 80; }, 60000));
    server.Kill9();
    ASSERT_TRUE(server.Start());
  }
  EXPECT_EQ(Wait(writer), 0);
  EXPECT_EQ(Wait(churn), 0);
  ASSERT_EQ(Lines(log), 400u);
  std::string out;
  EXPECT_EQ(RunClient(server.address(), "verify-log " + log + " 65536", &out), 0)
      << out << server.log();
  // The clients are gone: none of their reservations is left behind.
  EXPECT_TRUE(maru_test::WaitFor(
      [&] {
        return Maructl("df --json --server " + server.address()).find("\"reserved\":0") !=
               std::string::npos;
      },
      10000));
  int rc;
  out = Maructl("fsck --server " + server.address(), &rc);
  EXPECT_EQ(rc, 0) << out;
}

// Writers rewrite keys in a pool far smaller than them while two readers
// check 100k reads; every read must hold its own key's bytes.
void ReadersDuringEviction() {
  // 100 MiB of keys in a 32 MiB pool: every write evicts something.
  TestPool pool(32ull << 20);
  Server server(pool.path(), {"--eviction", "lru"});
  ASSERT_TRUE(server.Start());
  ASSERT_EQ(RunClient(server.address(), "churn /hot 400 262144 2"), 0);
  pid_t w1 = SpawnClient(server.address(), "churn /hot 400 262144 8");
  pid_t w2 = SpawnClient(server.address(), "churn /hot 400 262144 8");
  std::string out1, out2;
  pid_t r1 = SpawnClient(server.address(), "read-check /hot 400 8 50000");
  std::string out;
  EXPECT_EQ(RunClient(server.address(), "read-check /hot 400 8 50000", &out), 0) << out;
  EXPECT_EQ(Wait(r1), 0);
  EXPECT_EQ(Wait(w1), 0);
  EXPECT_EQ(Wait(w2), 0);
  int rc;
  std::string stats = Maructl("stats --json --server " + server.address(), &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(stats.find("\"evictions\":0,"), std::string::npos) << stats;  // it did evict
  out = Maructl("fsck --server " + server.address(), &rc);
  EXPECT_EQ(rc, 0) << out;
}

// Readers open through the shared-memory index (the default): leases in
// slots, which eviction passes over and reuse waits for.
TEST(Lifecycle, ReadersNeverSeeAnotherChunksBytesDuringEviction) {
  ReadersDuringEviction();
}

// The same by message (MARU_INDEX=0, inherited by the client processes).
TEST(Lifecycle, ReadersNeverSeeAnotherChunksBytesDuringEvictionByMessage) {
  setenv("MARU_INDEX", "0", 1);
  ReadersDuringEviction();
  unsetenv("MARU_INDEX");
}

TEST(Lifecycle, FsckAndVerifyFindCorruptedBytes) {
  TestPool pool(64ull << 20);
  Server server(pool.path());
  ASSERT_TRUE(server.Start());
  maru_t *m;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  for (int kind : {MARU_CHECKSUM_XXH3, MARU_CHECKSUM_CRC32C}) {
    std::string path = "/sum/" + std::to_string(kind);
    maru_create_opts_t opts{};
    opts.checksum = kind;
    maru_chunk_t *c;
    ASSERT_EQ(maru_create_ex(m, path.c_str(), 1 << 20, &opts, &c), 0);
    maru_test::FillPattern(maru_chunk_data(c), 1 << 20, path);
    ASSERT_EQ(maru_seal(c), 0);
    EXPECT_EQ(maru_verify(c), 0);
    maru_release(c);
  }
  int rc;
  std::string out = Maructl("fsck --server " + server.address(), &rc);
  EXPECT_EQ(rc, 0) << out;
  out = Maructl("verify /sum/1 --server " + server.address(), &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find(": ok"), std::string::npos) << out;
  // Flip a byte of /sum/1 in the pool device.
  std::string stat = Maructl("stat /sum/1 --json --server " + server.address(), &rc);
  ASSERT_EQ(rc, 0) << stat;
  size_t at = stat.find("\"offset\":");
  ASSERT_NE(at, std::string::npos) << stat;
  off_t offset = strtoll(stat.c_str() + at + 9, nullptr, 10);
  int fd = open(pool.path().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char b;
  ASSERT_EQ(pread(fd, &b, 1, offset + 12345), 1);
  b ^= 0x40;
  ASSERT_EQ(pwrite(fd, &b, 1, offset + 12345), 1);
  close(fd);
  out = Maructl("verify /sum/1 --server " + server.address(), &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("mismatch"), std::string::npos) << out;
  maru_chunk_t *c;
  ASSERT_EQ(maru_open(m, "/sum/1", &c), 0);
  EXPECT_EQ(maru_verify(c), -EBADMSG);
  maru_release(c);
  out = Maructl("fsck --server " + server.address(), &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("/sum/1"), std::string::npos) << out;
  EXPECT_EQ(out.find("/sum/2"), std::string::npos) << out;
  // JSON for scripts.
  out = Maructl("fsck --json --server " + server.address(), &rc);
  EXPECT_NE(out.find("\"ok\":false"), std::string::npos) << out;
  maru_disconnect(m);
}

TEST(Lifecycle, PinsHoldUntilUnpinnedOrTheirTtl) {
  TestPool pool(16ull << 20, 64u << 10, "", "--index-size 0");  // all 16 MiB for chunks
  Server server(pool.path(), {"--high-watermark", "1", "--low-watermark", "1"});
  ASSERT_TRUE(server.Start());
  maru_t *m;
  ASSERT_EQ(maru_connect(server.address().c_str(), &m), 0);
  ASSERT_EQ(RunClient(server.address(), "store /p/a 4194304 + store /p/b 4194304"), 0);
  ASSERT_EQ(maru_pin(m, "/p/a"), 0);
  int rc;
  // A TTL a loaded host cannot outrun before the full-pool create below.
  Maructl("pin /p/b --ttl 5 --server " + server.address(), &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_NE(Maructl("ls /p --server " + server.address()).find("pinned"), std::string::npos);
  // Two more 4 MiB chunks need the space of both pinned ones: neither goes.
  ASSERT_EQ(RunClient(server.address(), "store /p/c 4194304"), 0);
  EXPECT_EQ(RunClient(server.address(), "create-errno /p/d 8388608 " + std::to_string(ENOSPC)), 0);
  // The TTL runs out: /p/b may go now; /p/a stays until unpinned.
  EXPECT_TRUE(maru_test::WaitFor(
      [&] {
        return Maructl("stat /p/b --json --server " + server.address()).find("\"pinned\":false") !=
               std::string::npos;
      },
      30000));
  ASSERT_EQ(RunClient(server.address(), "store /p/d 8388608"), 0);
  EXPECT_EQ(RunClient(server.address(), "open-errno /p/b " + std::to_string(ENOENT)), 0);
  EXPECT_EQ(RunClient(server.address(), "open-errno /p/a 0"), 0);
  ASSERT_EQ(maru_unpin(m, "/p/a"), 0);
  EXPECT_NE(Maructl("stat /p/a --json --server " + server.address()).find("\"pinned\":false"),
            std::string::npos);
  EXPECT_EQ(maru_pin(m, "/p/missing"), -ENOENT);
  maru_disconnect(m);
}

// A trace in the Mooncake format: conversations that share a system prompt
// and grow turn by turn, so later turns reuse the prefix of earlier ones.
std::string WriteSyntheticTrace(const std::string &path) {
  std::ofstream out(path);
  std::mt19937_64 rng(7);
  const int kConversations = 80, kSystemBlocks = 4;
  std::vector<std::vector<uint64_t>> turns(kConversations);
  uint64_t next_block = 1000;
  for (int r = 0; r < 900; ++r) {
    auto &conv = turns[rng() % kConversations];
    if (conv.empty())
      for (int b = 0; b < kSystemBlocks; ++b) conv.push_back(static_cast<uint64_t>(b));
    for (uint64_t grow = 1 + rng() % 3; grow > 0; --grow) conv.push_back(next_block++);
    out << "{\"timestamp\": " << r * 10 << ", \"input_length\": " << conv.size() * 512
        << ", \"output_length\": 100, \"hash_ids\": [";
    for (size_t i = 0; i < conv.size(); ++i) out << (i ? ", " : "") << conv[i];
    out << "]}\n";
  }
  return path;
}

TEST(Lifecycle, ReplayMatchesTheOfflineLruSimulation) {
  // 64 KiB blocks (1/1024 of Llama-3.1-8B's), a pool of 191 of them for a
  // working set of about 2000.
  TestPool pool(12ull << 20);
  Server server(pool.path(),
                {"--high-watermark", "1", "--low-watermark", "1", "--eviction", "lru"});
  ASSERT_TRUE(server.Start());
  maru_test::TempDir dir;
  const std::string trace = WriteSyntheticTrace(dir.path() + "/trace.jsonl");
  std::string out;
  int rc = maru_test::Run(maru_test::BinDir("tools/maru-bench") + " replay --trace " + trace +
                              " --server " + server.address() + " --clients 1 --json",
                          &out);
  ASSERT_EQ(rc, 0) << out;
  std::string last = out.substr(out.rfind('{'));
  auto field = [&](const std::string &name) {
    size_t at = last.find("\"" + name + "\":");
    EXPECT_NE(at, std::string::npos) << name << " missing in " << last;
    return strtod(last.c_str() + at + name.size() + 3, nullptr);
  };
  double live = field("hit_ratio"), lru = field("offline_lru_hit_ratio"),
         best = field("belady_hit_ratio");
  EXPECT_GT(field("requests_per_s"), 0);
  EXPECT_GT(lru, 0.0);
  EXPECT_NEAR(live, lru, 0.02) << last;
  EXPECT_LE(lru, best + 1e-9) << last;
  // Every hit was read in place and held the block asked for.
  EXPECT_EQ(field("wrong_blocks"), 0) << last;
  EXPECT_GT(field("zero_copy_bytes"), 0) << last;
  EXPECT_GT(field("prefix_p99_us"), 0) << last;
}

// The server's policy, live with one client, does what the offline
// simulator (maru-bench policies) says it does on the same trace and
// capacity: the simulator drives the very policy class as the Evictor does.
// With retention hints too, also those given requests after the request
// they are about (a conversation's late drop).
TEST(Lifecycle, ReplayMatchesTheOfflineSimulationOfTheServersPolicy) {
  const std::pair<std::string, std::string> runs[] = {
      {"frequency", ""}, {"prefix", ""}, {"frequency", "keep+drop:late-20"}};
  for (const auto &[policy, hints] : runs) {
    SCOPED_TRACE(policy + " " + hints);
    TestPool pool(12ull << 20);
    Server server(pool.path(),
                  {"--high-watermark", "1", "--low-watermark", "1", "--eviction", policy});
    ASSERT_TRUE(server.Start());
    maru_test::TempDir dir;
    const std::string trace = WriteSyntheticTrace(dir.path() + "/trace.jsonl");
    std::string out;
    int rc = maru_test::Run(maru_test::BinDir("tools/maru-bench") + " replay --trace " + trace +
                                " --server " + server.address() + " --clients 1 --policy " +
                                policy + (hints.empty() ? "" : " --hints " + hints) + " --json",
                            &out);
    ASSERT_EQ(rc, 0) << out;
    const std::string last = out.substr(out.rfind('{'));
    auto field = [&](const std::string &name) {
      size_t at = last.find("\"" + name + "\":");
      EXPECT_NE(at, std::string::npos) << name << " missing in " << last;
      return strtod(last.c_str() + at + name.size() + 3, nullptr);
    };
    EXPECT_GT(field("hit_ratio"), 0) << last;
    EXPECT_EQ(field("errors"), 0) << last;
    EXPECT_NEAR(field("hit_ratio"), field("offline_policy_hit_ratio"), 0.005) << last;
  }
}

}  // namespace
