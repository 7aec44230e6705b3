// The index in the pool's own region (docs/design.md, "The index in shared
// memory"): a pool made with a region for it (maructl mkpool --index-size)
// holds the index there, so a client on any host that maps the pool looks
// up, opens and releases without a message, also over TCP. Real servers,
// real pools, real client processes; hosts are network and mount
// namespaces on this machine (tests/harness.h).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "alloc/pool_device.h"
#include "harness.h"
#include "index_helpers.h"
#include "index_layout.h"

namespace maru_test {
namespace {

constexpr int kPort = 7413;  // free in host 0's namespace

// Calls the server answered that a read through the index would not make.
uint64_t ReadCalls(const std::string &server) {
  const std::string json = Maructl("stats --json --server " + server);
  uint64_t calls = 0;
  for (const char *name : {"Open", "Release", "LookupPrefix", "CountPrefix", "GetAttr"}) {
    const std::string key = std::string("{\"op\":\"") + name + "\",\"count\":";
    for (size_t at = json.find(key); at != std::string::npos; at = json.find(key, at + 1))
      calls += std::stoull(json.substr(at + key.size()));
  }
  return calls;
}

// The pool's index region, mapped in this process as a client maps it.
class Region {
 public:
  explicit Region(const std::string &pool) {
    maru::Result<maru::Superblock> sb = maru::ReadSuperblock(pool);
    if (!sb.ok() || sb->index_bytes == 0) return;
    fd_ = open(pool.c_str(), O_RDWR | O_CLOEXEC);
    if (fd_ < 0) return;
    bytes_ = sb->index_offset + sb->index_bytes;
    void *p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p != MAP_FAILED) base_ = static_cast<char *>(p) + sb->index_offset;
    region_bytes_ = sb->index_bytes;
  }
  ~Region() {
    if (base_) munmap(base_ - (bytes_ - region_bytes_), bytes_);
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return base_ != nullptr; }
  maru::index::Header *header() const { return reinterpret_cast<maru::index::Header *>(base_); }
  uint64_t bytes() const { return region_bytes_; }
  // The generations held in every lease slot of every region.
  std::vector<uint64_t> SlotsHeld() const {
    std::vector<uint64_t> held;
    const maru::index::Header &h = *header();
    for (uint32_t r = 0; r < h.regions; ++r) {
      maru::index::Region *region = maru::index::RegionAt(base_, h, r);
      for (uint32_t s = 0; s < h.slots_per_region; ++s)
        if (uint64_t gen = region->slots[s].load()) held.push_back(gen);
    }
    return held;
  }

 private:
  int fd_ = -1;
  char *base_ = nullptr;
  uint64_t bytes_ = 0, region_bytes_ = 0;
};

// Two hosts: the server on host 0, listening on TCP with a token; clients
// on host 1 reach it over the network and map the one pool.
class PoolIndexHostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(hosts_.ok());
    const std::string d = dir_.path();
    std::ofstream(d + "/tokens") << "pool-index-client-token 1001:1001\n";
    ASSERT_EQ(chmod((d + "/tokens").c_str(), 0600), 0);
    std::ofstream(d + "/client-token") << "pool-index-client-token\n";
    address_ = "tcp://" + hosts_[0].ip() + ":" + std::to_string(kPort);
    server_ = std::make_unique<Server>(
        pool_.path(),
        std::vector<std::string>{"--listen", address_, "--token-file", d + "/tokens"});
    server_->RunOn(&hosts_[0]);
    ASSERT_TRUE(server_->Start());
    ASSERT_TRUE(WaitFor([&] { return Client(1, "connect") == 0; }, 30000)) << server_->log();
  }

  // Runs a libmaru_direct script (tests/helpers/direct_client) on host `h`.
  int Client(int h, const std::string &script, std::string *out = nullptr,
             const std::string &env = "") {
    return maru_test::Run(hosts_[h].Exec() + env + "MARU_TOKEN_FILE=" + dir_.path() +
                              "/client-token " + ClientCommand(address_, script),
                          out);
  }

  // Bytes the server keeps for readers of chunks that are gone.
  uint64_t Deferred() {
    const std::string json = Maructl("df --json --server " + server_->address());
    const size_t at = json.find("\"deferred\":");
    return at == std::string::npos ? ~0ull : std::stoull(json.substr(at + 11));
  }

  Hosts hosts_{2};
  TempDir dir_;
  TestPool pool_{64ull << 20};
  std::unique_ptr<Server> server_;
  std::string address_;
};

TEST_F(PoolIndexHostsTest, AClientOverTcpOnAnotherHostReadsThroughThePoolsIndex) {
  ASSERT_TRUE(Region(pool_.path()).ok()) << "mkpool reserved no index region by default";
  EXPECT_NE(access((pool_.path() + ".index").c_str(), F_OK), 0) << "an index file beside it";
  const std::string size = std::to_string(kSize);
  std::string out;
  ASSERT_EQ(Client(1, "store /pi/a " + size + " + store /pi/b " + size, &out), 0) << out;
  const std::string reads = "load /pi/a " + size + " " + pool_.path() +
                            " + lookup 2 /pi/a /pi/b /pi/none + count 2 /pi/a /pi/b /pi/none" +
                            " + load /pi/b " + size + " " + pool_.path();
  // By message, the server answers each open, release, lookup and count.
  const uint64_t before = ReadCalls(server_->address());
  ASSERT_EQ(Client(1, reads, &out, "MARU_INDEX=0 "), 0) << out;
  const uint64_t by_message = ReadCalls(server_->address());
  EXPECT_GE(by_message, before + 4);
  // Through the pool's index, it answers none of them: the client found
  // the chunks, leased and released them in the pool.
  ASSERT_EQ(Client(1, reads, &out), 0) << out;
  EXPECT_EQ(ReadCalls(server_->address()), by_message);
}

TEST_F(PoolIndexHostsTest, ALeaseInTheRegionKeepsAChunkAnotherHostUnlinks) {
  const std::string size = std::to_string(kSize);
  std::string out;
  ASSERT_EQ(Client(1, "store /pi/held " + size, &out), 0) << out;
  const std::string go = dir_.path() + "/go";
  // Opened through the pool's index on host 1 (its lease is a slot in the
  // pool), held while the name is unlinked: the server keeps the extents
  // (deferred) until the slot is cleared.
  const std::string said = dir_.path() + "/holder.out";
  const pid_t holder =
      Spawn(hosts_[1].Exec() + "MARU_TOKEN_FILE=" + dir_.path() + "/client-token " +
                ClientCommand(address_, "hold-read /pi/held " + size + " " + go),
            said);
  ASSERT_TRUE(WaitFor([&] { return Region(pool_.path()).SlotsHeld().size() == 1; }, 30000));
  ASSERT_EQ(Client(1, "unlink-errno /pi/held 0", &out), 0) << out;
  EXPECT_GE(Deferred(), kSize);
  std::ofstream(go).close();
  EXPECT_EQ(Wait(holder), 0);
  EXPECT_NE(ReadFile(said).find("read ok"), std::string::npos) << ReadFile(said);
  EXPECT_TRUE(WaitFor([&] { return Region(pool_.path()).SlotsHeld().empty(); }));
  EXPECT_TRUE(WaitFor([&] { return Deferred() == 0; }, 30000));
}

// A server on the machine itself (a Unix socket), for what needs no hosts.
class PoolIndexTest : public ::testing::Test {
 protected:
  TempDir dir_;
  TestPool pool_{64ull << 20};
  Server server_{pool_.path(), {"--session-timeout-ms", "1500", "--heartbeat-ms", "300"}};
};

TEST_F(PoolIndexTest, ARestartEmptiesTheRegionAndRebuildsIt) {
  ASSERT_TRUE(server_.Start());
  const std::string size = std::to_string(kSize);
  std::string out;
  ASSERT_EQ(maru_test::Run(ClientCommand(server_.address(), "store /r/a " + size), &out), 0) << out;
  Region region(pool_.path());
  ASSERT_TRUE(region.ok());
  const uint64_t first = region.header()->instance;
  EXPECT_EQ(region.header()->state.load(), maru::index::kLive);
  // A client killed holding a lease in its slot leaves it filled.
  const std::string go = dir_.path() + "/never";
  const pid_t holder = Spawn(ClientCommand(server_.address(), "hold-read /r/a " + size + " " + go),
                             dir_.path() + "/holder.out");
  ASSERT_TRUE(WaitFor([&] { return region.SlotsHeld().size() == 1; }, 30000));
  server_.Kill9();
  kill(holder, SIGKILL);
  Wait(holder);
  EXPECT_EQ(region.SlotsHeld().size(), 1u);
  // The next server empties every slot and enters what the pool holds.
  ASSERT_TRUE(server_.Start());
  EXPECT_NE(region.header()->instance, first);
  EXPECT_EQ(region.header()->state.load(), maru::index::kLive);
  EXPECT_TRUE(region.SlotsHeld().empty());
  EXPECT_EQ(maru_test::Run(
                ClientCommand(server_.address(), "load /r/a " + size + " " + pool_.path()), &out),
            0)
      << out;
  // A clean stop leaves the region dead, not live: clients ask the server.
  server_.Stop();
  EXPECT_EQ(region.header()->state.load(), maru::index::kDead);
}

TEST_F(PoolIndexTest, AForgedHeaderNeitherCrashesNorMisleadsTheServer) {
  ASSERT_TRUE(server_.Start());
  const std::string size = std::to_string(kSize);
  std::string out;
  ASSERT_EQ(maru_test::Run(ClientCommand(server_.address(), "store /f/a " + size), &out), 0) << out;
  Region region(pool_.path());
  ASSERT_TRUE(region.ok());
  // Every layout word a member of the pool's group could write, made to
  // point outside the region (or at the server's own memory).
  maru::index::Header *h = region.header();
  h->entries = 1ull << 60;
  h->entries_offset = ~0ull - 4096;
  h->regions = ~0u;
  h->regions_offset = 1ull << 62;
  h->slots_per_region = ~0u;
  // The server goes on: stores, rewrites, unlinks and lookups by message;
  // a new client does not trust the header and asks the server.
  EXPECT_EQ(maru_test::Run(ClientCommand(server_.address(),
                                         "store /f/b " + size + " + load /f/a " + size + " " +
                                             pool_.path() + " + unlink-errno /f/a 0 + store /f/a " +
                                             size + " + lookup 2 /f/a /f/b + count 2 /f/a /f/b"),
                           &out),
            0)
      << out;
  EXPECT_TRUE(server_.running());
  // A restart writes a good header again, and clients read through it.
  server_.Stop();
  ASSERT_TRUE(server_.Start());
  EXPECT_EQ(h->entries & (h->entries - 1), 0u);
  EXPECT_LE(maru::index::FileBytes(h->entries, h->regions), region.bytes());
  const uint64_t before = ReadCalls(server_.address());
  EXPECT_EQ(maru_test::Run(ClientCommand(server_.address(), "lookup 2 /f/a /f/b"), &out), 0) << out;
  EXPECT_EQ(ReadCalls(server_.address()), before);
}

TEST_F(PoolIndexTest, ADeadSessionsRegionIsClearedBeforeItPassesOn) {
  ASSERT_TRUE(server_.Start());
  const std::string size = std::to_string(kSize);
  std::string out;
  ASSERT_EQ(maru_test::Run(ClientCommand(server_.address(), "store /s/a " + size), &out), 0) << out;
  Region region(pool_.path());
  ASSERT_TRUE(region.ok());
  // A client killed with a lease in its slot: its session expires, and the
  // region goes, emptied, to the next session that asks.
  const pid_t holder =
      Spawn(ClientCommand(server_.address(), "hold-read /s/a " + size + " /nonexistent/go"),
            dir_.path() + "/holder.out");
  ASSERT_TRUE(WaitFor([&] { return region.SlotsHeld().size() == 1; }, 30000));
  kill(holder, SIGKILL);
  Wait(holder);
  EXPECT_TRUE(WaitFor([&] { return region.SlotsHeld().empty(); }, 30000));
  EXPECT_EQ(maru_test::Run(
                ClientCommand(server_.address(), "load /s/a " + size + " " + pool_.path()), &out),
            0)
      << out;
}

TEST(PoolIndexFit, AServerWhoseIndexDoesNotFitTheRegionRefusesNamingTheFlag) {
  TestPool pool{64ull << 20};
  Server server{pool.path(), {"--index-entries", "16777216"}};
  std::string out;
  EXPECT_NE(server.RunToExit(&out), 0);
  EXPECT_NE(out.find("--index-entries"), std::string::npos) << out;
  EXPECT_NE(out.find("--index-size"), std::string::npos) << out;
}

TEST(PoolIndexFile, APoolWithoutTheRegionKeepsTheFile) {
  TestPool pool{64ull << 20, 64u << 10, "", "--index-size 0"};
  ASSERT_FALSE(Region(pool.path()).ok());
  Server server{pool.path()};
  ASSERT_TRUE(server.Start());
  EXPECT_EQ(access((pool.path() + ".index").c_str(), F_OK), 0);
  const std::string size = std::to_string(kSize);
  std::string out;
  ASSERT_EQ(maru_test::Run(ClientCommand(server.address(), "store /n/a " + size), &out), 0) << out;
  const uint64_t before = ReadCalls(server.address());
  EXPECT_EQ(maru_test::Run(ClientCommand(server.address(), "load /n/a " + size + " " + pool.path()),
                           &out),
            0)
      << out;
  EXPECT_EQ(ReadCalls(server.address()), before);  // through the file
}

}  // namespace
}  // namespace maru_test
