// Hosts without CXL: maru-server, maru-agent and a remote client as separate
// processes, the client in its own network namespace behind a veth pair, so
// the bytes cross a network interface (UCX over TCP).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "harness.h"
#include "rdma/extent_registry.h"
#include "rdma/staging_cache.h"
#include "rdma/ucx_worker.h"
#include "util/clock.h"
#include "util/units.h"

namespace {

using maru_test::Agent;
using maru_test::NetNs;
using maru_test::Server;
using maru_test::TestPool;

std::string Slurp(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class RemoteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("UCX_TLS", "tcp", 1);
    setenv("UCX_NET_DEVICES", ns_.host_if().c_str(), 1);
    ASSERT_TRUE(ns_.ok());
    port_ = 30000 + (getpid() * 13) % 20000;
    server_ = std::make_unique<Server>(
        pool_.path(),
        std::vector<std::string>{"--listen", "tcp://" + ns_.host_ip() + ":" + std::to_string(port_),
                                 "--session-timeout-ms", "1500", "--heartbeat-ms", "300"});
    ASSERT_TRUE(server_->Start());
    agent_ =
        std::make_unique<Agent>(pool_.path(), server_->address(), "tcp://" + ns_.host_ip() + ":0");
    ASSERT_TRUE(agent_->Start());
  }
  void TearDown() override {
    // What the daemons saw, where CI shows nothing else of a failure.
    if (HasFailure() && server_ && agent_)
      fprintf(stderr, "--- server log:\n%s--- agent log:\n%s", server_->log().c_str(),
              agent_->log().c_str());
  }

  // direct_client on the remote host: over TCP, data through the agent.
  // `timeout_ms`: short, so that the failure tests end soon; longer where a
  // restart must first be caught up with on a loaded machine.
  std::string Remote(const std::string &script, int timeout_ms = 3000) {
    return "env UCX_TLS=tcp MARU_DATA=remote MARU_TIMEOUT_MS=" + std::to_string(timeout_ms) + " " +
           ns_.Exec() +
           maru_test::ClientCommand("tcp://" + ns_.host_ip() + ":" + std::to_string(port_), script);
  }
  // Runs `script` as Remote() does, in the background, its output in `log`.
  pid_t StartRemote(const std::string &script, const std::string &log, int timeout_ms = 3000) {
    pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c",
            ("exec " + Remote(script, timeout_ms) + " >" + log + " 2>&1").c_str(),
            static_cast<char *>(nullptr));
      _exit(127);
    }
    return pid;
  }
  int RunRemote(const std::string &script, std::string *out = nullptr) {
    std::string output;
    int rc = maru_test::Run(Remote(script), &output);
    if (rc) fprintf(stderr, "remote %s -> %d: %s\n", script.c_str(), rc, output.c_str());
    if (out) *out = output;
    return rc;
  }

  NetNs ns_;
  TestPool pool_{256ull << 20};
  int port_ = 0;
  std::unique_ptr<Server> server_;
  std::unique_ptr<Agent> agent_;
};

TEST_F(RemoteTest, StoreRemotelyReadLocallyAndTheOtherWay) {
  // Stored from the remote host: the bytes land in the pool, read in place here.
  ASSERT_EQ(
      RunRemote("store /remote/a 8388608 + fetch /remote/a 8388608 + read-into /remote/a 8388608"),
      0);
  EXPECT_EQ(maru_test::RunClient(server_->address(), "load /remote/a 8388608 " + pool_.path()), 0);
  // Stored here in place: the remote host reads the same bytes.
  ASSERT_EQ(
      maru_test::RunClient(server_->address(), "store /local/b 33554432 + store /local/c 4096"), 0);
  EXPECT_EQ(
      RunRemote("read-into /local/b 33554432 + fetch /local/b 33554432 + fetch /local/c 4096"), 0);
  // One agent serves many clients at once.
  std::vector<pid_t> readers;
  for (int i = 0; i < 3; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c",
            Remote("read-into /local/b 33554432 + fetch /remote/a 8388608").c_str(),
            static_cast<char *>(nullptr));
      _exit(127);
    }
    readers.push_back(pid);
  }
  for (pid_t pid : readers) EXPECT_EQ(maru_test::Wait(pid), 0);
  // Prefix lookups and errors work the same way remotely.
  EXPECT_EQ(RunRemote("lookup 2 /local/b /local/c /local/none"), 0);
  EXPECT_EQ(RunRemote("open-errno /local/none " + std::to_string(ENOENT)), 0);
}

TEST_F(RemoteTest, BatchedAndAllocatedStoresGoThroughTheAgent) {
  // Staging buffers go to the pool at seal and at publish, checked by the
  // agent against what the session holds (reservations and allocations).
  ASSERT_EQ(RunRemote("store-batch 1048576 /rb/a /rb/b + publish /rb/c 2097152 + "
                      "count 3 /rb/a /rb/b /rb/c /rb/none"),
            0);
  EXPECT_EQ(maru_test::RunClient(server_->address(), "load /rb/a 1048576 " + pool_.path() +
                                                         " + load /rb/b 1048576 " + pool_.path() +
                                                         " + load /rb/c 2097152 " + pool_.path()),
            0);
}

// Layer-wise through the agent: a remote writer's published parts reach the
// pool at maru_publish_part() (not only at the seal), and a remote reader
// reads the published parts of a chunk still being written.
TEST_F(RemoteTest, LayerWisePartsCrossTheAgent) {
  maru_test::TempDir dir;
  const std::string go = dir.path() + "/go";
  FILE *writer = popen(Remote("publish-hold /lw/remote 1048576 4 2 " + go).c_str(), "r");
  ASSERT_NE(writer, nullptr);
  char line[64] = {};
  ASSERT_NE(fgets(line, sizeof(line), writer), nullptr);
  EXPECT_STREQ(line, "published\n");
  EXPECT_EQ(maru_test::RunClient(server_->address(), "read-part /lw/remote 1048576 4 1"), 0);
  EXPECT_EQ(RunRemote("read-part /lw/remote 1048576 4 0"), 0);
  fclose(fopen(go.c_str(), "w"));
  EXPECT_EQ(pclose(writer), 0);
}

TEST_F(RemoteTest, StagingBuffersAreReusedAndNeverShowAnEarlierChunk) {
  // 9 MiB + 7 bytes: several fragments, and a tail that is not a whole word.
  const std::string size = "9437191";
  ASSERT_EQ(RunRemote("staging-reused /st/r " + size), 0);
  // One process: each chunk is staged in the buffer the one before gave
  // back (a writer's, then a reader's fetched copy), and half written.
  ASSERT_EQ(RunRemote("store /st/a " + size + " + store-half /st/b " + size + " + fetch /st/a " +
                      size + " + store-half /st/c " + size),
            0);
  for (const char *half : {"/st/b", "/st/c"}) {
    EXPECT_EQ(
        maru_test::RunClient(server_->address(), std::string("check-half ") + half + " " + size),
        0);
    EXPECT_EQ(RunRemote(std::string("check-half ") + half + " " + size), 0);
  }
  EXPECT_EQ(maru_test::RunClient(server_->address(), "load /st/a " + size + " " + pool_.path()), 0);
  EXPECT_EQ(RunRemote("read-into /st/r.1 " + size + " + fetch /st/r.2 " + size), 0);
}

TEST_F(RemoteTest, PeersWithUcxDefaultSegmentSizesInteroperate) {
  // maru-agent sends 64 KiB TCP segments and accepts 256 KiB ones; UCX 1.13
  // aborts a receiver sent a segment larger than its own receive size. A
  // client with UCX's defaults (8 KiB sent, 64 KiB received), as an older
  // libmaru_direct has, must store and load both ways without a crash.
  const std::string defaults = "env UCX_TCP_TX_SEG_SIZE=8kb UCX_TCP_RX_SEG_SIZE=64kb ";
  ASSERT_EQ(maru_test::Run(defaults + Remote("store /seg/a 8388608 + fetch /seg/a 8388608")), 0);
  ASSERT_EQ(maru_test::RunClient(server_->address(), "store /seg/b 8388608"), 0);
  EXPECT_EQ(maru_test::Run(defaults + Remote("read-into /seg/b 8388608")), 0);
  // And one that sends larger segments than ours is received.
  EXPECT_EQ(maru_test::Run("env UCX_TCP_TX_SEG_SIZE=256kb " + Remote("store /seg/c 8388608")), 0);
  EXPECT_EQ(maru_test::RunClient(server_->address(), "load /seg/c 8388608 " + pool_.path()), 0);
}

TEST_F(RemoteTest, AgentKilledMidTransferFailsCleanlyAndComesBack) {
  ASSERT_EQ(maru_test::RunClient(server_->address(), "store /big 67108864"), 0);
  maru_test::TempDir dir;
  const std::string log = dir.path() + "/reader.log";
  pid_t reader = StartRemote("read-through-outage /big 67108864", log);
  ASSERT_TRUE(
      maru_test::WaitFor([&] { return Slurp(log).find("reading") != std::string::npos; }, 30000))
      << Slurp(log);
  agent_->Kill9();
  ASSERT_TRUE(
      maru_test::WaitFor([&] { return Slurp(log).find("error") != std::string::npos; }, 30000))
      << Slurp(log);
  // A new agent, on another port: the client finds it through the server.
  ASSERT_TRUE(agent_->Start());
  EXPECT_EQ(maru_test::Wait(reader), 0) << Slurp(log);
  std::string out = Slurp(log);
  EXPECT_NE(out.find("recovered"), std::string::npos) << out;
  EXPECT_EQ(out.find("WRONG"), std::string::npos) << out;
}

TEST_F(RemoteTest, ALeaseLostMidTransferIsReportedNeverStale) {
  ASSERT_EQ(maru_test::RunClient(server_->address(), "store /lease/a 1048576"), 0);
  maru_test::TempDir dir;
  const std::string log = dir.path() + "/reader.log", go = dir.path() + "/go";
  pid_t reader = StartRemote("hold-read /lease/a 1048576 " + go, log);
  ASSERT_TRUE(
      maru_test::WaitFor([&] { return Slurp(log).find("opened") != std::string::npos; }, 30000))
      << Slurp(log);
  // The reader stalls past its session timeout; its lease goes, the chunk is
  // removed and its extents are written over by other chunks.
  ASSERT_TRUE(maru_test::Freeze(reader));
  ASSERT_EQ(maru_test::RunClient(server_->address(), "unlink-errno /lease/a 0"), 0);
  ASSERT_TRUE(maru_test::WaitFor(
      [&] {
        std::string out;
        maru_test::Run(maru_test::MaructlBinary() + " sessions --server " + server_->address(),
                       &out);
        return out.find("libmaru_direct") == std::string::npos;  // the stalled session expired
      },
      20000));
  std::string fill;
  for (int i = 0; i < 200; ++i) fill += " + store /fill/" + std::to_string(i) + " 1048576";
  ASSERT_EQ(maru_test::RunClient(server_->address(), fill.substr(3)), 0);
  std::ofstream(go).put('x');
  kill(reader, SIGCONT);
  EXPECT_EQ(maru_test::Wait(reader), 0);
  std::string out = Slurp(log);
  EXPECT_NE(out.find("read lease or reservation lost"), std::string::npos) << out;
  EXPECT_EQ(out.find("WRONG"), std::string::npos) << out;
}

// Grants as a remote client could tamper with them; the exit code of
// grant_client is the errno of its last transfer.
class GrantTest : public RemoteTest {
 protected:
  int Grant(const std::string &which, const std::string &target, bool nobody = false) {
    std::string out;
    int rc =
        maru_test::Run("env UCX_TLS=tcp " + ns_.Exec() +
                           (nobody ? "setpriv --reuid=65534 --regid=65534 --clear-groups " : "") +
                           maru_test::BinDir("tests/grant_client") + " tcp://" + ns_.host_ip() +
                           ":" + std::to_string(port_) + " " + which + " " + target,
                       &out);
    fprintf(stderr, "grant_client %s %s -> %d: %s", which.c_str(), target.c_str(), rc, out.c_str());
    last_ = out;
    return rc;
  }
  // Runs grant_client `how` (stall, odd-ids) and meanwhile serves others.
  void Misbehaving(const std::string &how) {
    ASSERT_EQ(maru_test::RunClient(server_->address(), "store /g/busy 1048576"), 0);
    maru_test::TempDir dir;
    const std::string log = dir.path() + "/staller.log", go = dir.path() + "/go";
    pid_t staller = fork();
    if (staller == 0) {
      execl("/bin/sh", "sh", "-c",
            ("exec env UCX_TLS=tcp " + ns_.Exec() + maru_test::BinDir("tests/grant_client") +
             " tcp://" + ns_.host_ip() + ":" + std::to_string(port_) + " " + how + " /g/busy " +
             go + " >" + log + " 2>&1")
                .c_str(),
            static_cast<char *>(nullptr));
      _exit(127);
    }
    ASSERT_TRUE(
        maru_test::WaitFor([&] { return Slurp(log).find("stalled") != std::string::npos; }, 30000))
        << Slurp(log);
    // Others are served meanwhile, again and again.
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(Grant("ok", "/g/busy"), 0);
      EXPECT_EQ(RunRemote("fetch /g/busy 1048576"), 0);
    }
    std::ofstream(go).put('x');
    EXPECT_EQ(maru_test::Wait(staller), 0) << Slurp(log);
    fprintf(stderr, "%s", Slurp(log).c_str());
  }
  std::string last_;
};

TEST_F(GrantTest, OnlyGrantsTheServerIssuedAreHonoured) {
  ASSERT_EQ(maru_test::RunClient(server_->address(), "store /g/a 1048576"), 0);
  EXPECT_EQ(Grant("ok", "/g/a"), 0);
  EXPECT_EQ(Grant("forged", "/g/a"), EKEYREJECTED);
  EXPECT_NE(last_.find("refused the grant"), std::string::npos) << last_;
  EXPECT_EQ(Grant("modified", "/g/a"), EKEYREJECTED);
  EXPECT_EQ(Grant("expired", "/g/a"), EKEYEXPIRED);
}

TEST_F(GrantTest, AReadGrantGivesNoWrite) {
  ASSERT_EQ(maru_test::RunClient(server_->address(), "store /g/ro 1048576"), 0);
  // The server will not sign a write grant for a lease...
  EXPECT_EQ(Grant("write-on-lease", "/g/ro"), EACCES);
  // ...and a read grant made writable is no longer the server's.
  EXPECT_EQ(Grant("write-flip", "/g/ro"), EKEYREJECTED);
  // The chunk is as it was stored.
  EXPECT_EQ(RunRemote("fetch /g/ro 1048576"), 0);
}

TEST_F(GrantTest, AnotherSessionsExtentsAreRefused) {
  ASSERT_EQ(maru_test::RunClient(server_->address(), "store /g/secret 1048576"), 0);
  ASSERT_EQ(Grant("extents", "/g/secret"), 0);
  const std::string extent = last_.substr(0, last_.find('\n'));
  ASSERT_FALSE(extent.empty());
  // Another session (root's, here) holds a lease on those extents.
  maru_test::TempDir dir;
  const std::string log = dir.path() + "/holder.log", go = dir.path() + "/go";
  pid_t holder = fork();
  if (holder == 0) {
    execl("/bin/sh", "sh", "-c",
          ("exec " +
           maru_test::ClientCommand(server_->address(), "hold-read /g/secret 1048576 " + go) +
           " >" + log + " 2>&1")
              .c_str(),
          static_cast<char *>(nullptr));
    _exit(127);
  }
  ASSERT_TRUE(
      maru_test::WaitFor([&] { return Slurp(log).find("opened") != std::string::npos; }, 30000))
      << Slurp(log);
  EXPECT_EQ(Grant("other", extent, true), ESTALE);  // another uid
  EXPECT_EQ(Grant("other", extent), ESTALE);        // the same uid, another session
  std::ofstream(go).put('x');
  EXPECT_EQ(maru_test::Wait(holder), 0) << Slurp(log);
}

// The bytes of the pool file (one device) at "DEV:OFF:LEN".
std::string PoolBytes(const std::string &pool, const std::string &extent) {
  unsigned long long offset = 0, length = 0;
  unsigned device = 0;
  if (sscanf(extent.c_str(), "%u:%llu:%llu", &device, &offset, &length) != 3) return "";
  std::ifstream in(pool, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset));
  std::string bytes(length, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(length));
  return bytes;
}

// Where the maru-agent this test started maps the whole of `pool`: its
// largest mapping of the file (it maps it from offset 0), or 0.
uint64_t AgentMapping(const std::string &pool) {
  uint64_t best = 0, best_size = 0;
  for (const auto &entry : std::filesystem::directory_iterator("/proc")) {
    const std::string dir = entry.path().string();
    std::string stat = Slurp(dir + "/stat");
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    int ppid = 0;
    char state = 0;
    if (sscanf(stat.c_str() + paren + 1, " %c %d", &state, &ppid) != 2 || ppid != getpid())
      continue;
    if (Slurp(dir + "/cmdline").find("maru-agent") == std::string::npos) continue;
    std::istringstream maps(Slurp(dir + "/maps"));
    for (std::string line; std::getline(maps, line);) {
      if (line.find(pool) == std::string::npos) continue;
      unsigned long long from = 0, to = 0;
      if (sscanf(line.c_str(), "%llx-%llx", &from, &to) == 2 && to - from > best_size) {
        best = from;
        best_size = to - from;
      }
    }
  }
  return best;
}

TEST_F(GrantTest, OneSidedPutAndGetReachNothingOverTcp) {
  ASSERT_EQ(maru_test::RunClient(server_->address(), "store /g/rma 1048576"), 0);
  ASSERT_EQ(Grant("extents", "/g/rma"), 0);
  const std::string extent = last_.substr(0, last_.find('\n'));
  const std::string before = PoolBytes(pool_.path(), extent);
  ASSERT_FALSE(before.empty());
  const uint64_t base = AgentMapping(pool_.path());
  ASSERT_NE(base, 0u);
  unsigned long long offset = 0;
  ASSERT_EQ(sscanf(extent.c_str(), "%*u:%llu", &offset), 1);
  char address[32];
  snprintf(address, sizeof(address), "%llx", static_cast<unsigned long long>(base + offset));
  // The agent's UCX serves no get/put on TCP: the put fails (or its
  // endpoint is closed), the bytes are as they were, the agent serves on.
  EXPECT_NE(Grant("rma", address), 0);
  EXPECT_TRUE(PoolBytes(pool_.path(), extent) == before) << "the extent changed";
  EXPECT_EQ(RunRemote("fetch /g/rma 1048576"), 0);
}

TEST_F(GrantTest, EveryRangeIsCheckedOnTheCheckedPath) {
  ASSERT_EQ(maru_test::RunClient(server_->address(), "store /g/range 1048576"), 0);
  ASSERT_EQ(Grant("extents", "/g/range"), 0);
  const std::string extent = last_.substr(0, last_.find('\n'));
  const std::string before = PoolBytes(pool_.path(), extent);
  ASSERT_FALSE(before.empty());
  // A valid read grant's ticket does not write...
  EXPECT_EQ(Grant("read-write", "/g/range"), EACCES);
  EXPECT_TRUE(PoolBytes(pool_.path(), extent) == before) << "the extent changed";
  // ...nor read a byte past its extent.
  EXPECT_EQ(Grant("outside", "/g/range"), ERANGE);
  EXPECT_EQ(RunRemote("fetch /g/range 1048576"), 0);
}

TEST_F(GrantTest, ManyTransfersInOneBatchCrossTheCheckedPath) {
  // 300 chunks: two grants (at most 256 extents each), far more reads than
  // the client keeps in flight at once.
  std::string store = "store-batch 8192";
  for (int i = 0; i < 300; ++i) store += " /many/" + std::to_string(i);
  ASSERT_EQ(maru_test::RunClient(server_->address(), store), 0);
  EXPECT_EQ(Grant("many", "/many/:300:8192"), 0);
}

TEST_F(GrantTest, AGrantEndsWithItsLease) {
  ASSERT_EQ(maru_test::RunClient(server_->address(), "store /g/gone 1048576"), 0);
  EXPECT_EQ(Grant("released", "/g/gone"), ESTALE);
  EXPECT_EQ(Grant("released", "/g/gone", true), ESTALE);
}

TEST_F(GrantTest, GrantsFromARestartedServerAreHonoured) {
  ASSERT_EQ(maru_test::RunClient(server_->address(), "store /g/kept 1048576"), 0);
  maru_test::TempDir dir;
  const std::string log = dir.path() + "/reader.log", go = dir.path() + "/go";
  pid_t reader = StartRemote("hold-read /g/kept 1048576 " + go, log, 20000);
  ASSERT_TRUE(
      maru_test::WaitFor([&] { return Slurp(log).find("opened") != std::string::npos; }, 30000))
      << Slurp(log);
  // A new server signs with a new key; the agent fetches it when a grant
  // does not verify.
  server_->Kill9();
  ASSERT_TRUE(server_->Start());
  std::ofstream(go).put('x');
  EXPECT_EQ(maru_test::Wait(reader), 0) << Slurp(log);
  EXPECT_NE(Slurp(log).find("read ok"), std::string::npos) << Slurp(log);
  EXPECT_EQ(Slurp(log).find("WRONG"), std::string::npos) << Slurp(log);
}

TEST_F(GrantTest, AGrantThatExpiresOnItsWayIsIssuedAgain) {
  ASSERT_EQ(maru_test::RunClient(server_->address(), "store /g/late 1048576"), 0);
  maru_test::TempDir dir;
  const std::string log = dir.path() + "/reader.log", go = dir.path() + "/go";
  pid_t reader = StartRemote("hold-read /g/late 1048576 " + go, log, 30000);
  ASSERT_TRUE(
      maru_test::WaitFor([&] { return Slurp(log).find("opened") != std::string::npos; }, 30000))
      << Slurp(log);
  // The agent is stalled while the reader's grant waits for it, until the
  // grant has expired (its TTL is at most kMaxGrantTtlMs, 5 s; the reader
  // asks for it at once, and waits 30 s for an answer; 12 s leave a slow
  // reader 7 s to ask).
  ASSERT_TRUE(maru_test::Freeze(agent_->pid()));
  std::ofstream(go).put('x');
  const auto expired = std::chrono::steady_clock::now() + std::chrono::milliseconds(12000);
  maru_test::WaitFor([&] { return std::chrono::steady_clock::now() >= expired; }, 15000);
  kill(agent_->pid(), SIGCONT);
  EXPECT_EQ(maru_test::Wait(reader), 0) << Slurp(log);
  const std::string out = Slurp(log);
  EXPECT_NE(out.find("expired on its way"), std::string::npos) << out;
  EXPECT_NE(out.find("read ok"), std::string::npos) << out;
  EXPECT_EQ(out.find("WRONG"), std::string::npos) << out;
}

// A client that floods the agent and stops reading, or sends messages the
// agent does not expect, stalls no one.
TEST_F(GrantTest, AClientThatDoesNotDrainStallsNoOne) {
  Misbehaving("stall");
}

TEST_F(GrantTest, MessagesTheAgentDoesNotExpectStallNoOne) {
  Misbehaving("odd-ids");
}

TEST(Agent, ListensOnLoopbackByDefault) {
  unsetenv("UCX_NET_DEVICES");  // a deleted veth of an earlier test
  TestPool pool(64ull << 20);
  Server server(pool.path());
  ASSERT_TRUE(server.Start());
  maru_test::TempDir dir;
  const std::string log = dir.path() + "/agent.log";
  pid_t agent = fork();
  if (agent == 0) {
    execl("/bin/sh", "sh", "-c",
          ("exec " + maru_test::BinDir("src/rdma/maru-agent") + " --pool " + pool.path() +
           " --server " + server.address() + " >" + log + " 2>&1")
              .c_str(),
          static_cast<char *>(nullptr));
    _exit(127);
  }
  // Serving on 127.0.0.1:7071, or (that port taken) failing to listen there.
  ASSERT_TRUE(maru_test::WaitFor(
      [&] {
        std::string text = Slurp(log);
        return text.find("serving") != std::string::npos ||
               text.find("cannot listen") != std::string::npos;
      },
      30000))
      << Slurp(log);
  kill(agent, SIGTERM);
  maru_test::Wait(agent);
  EXPECT_NE(Slurp(log).find("127.0.0.1:7071"), std::string::npos) << Slurp(log);
}

// A client's staging buffers: registered once, reused by size, zeroed for
// writers, and never more kept than the bound; after Close (the UCX context
// going) given back buffers are freed.
TEST(StagingCache, ReusesRegisteredBuffersWithinItsBound) {
  setenv("UCX_TLS", "tcp", 1);
  unsetenv("UCX_NET_DEVICES");  // a deleted veth of an earlier test
  auto ucx = maru::UcxWorker::Create();
  ASSERT_TRUE(ucx.ok());
  auto cache = maru::StagingCache::Create((*ucx)->context(), 3ull << 20);
  uint8_t *first = nullptr;
  {
    auto b = cache->Acquire(1000000, false);  // rounded up to 1 MiB
    ASSERT_TRUE(b.ok());
    EXPECT_EQ((*b)->capacity(), 1ull << 20);
    EXPECT_NE((*b)->memh(), nullptr);
    memset((*b)->data(), 0xab, (*b)->capacity());
    first = (*b)->data();
  }
  EXPECT_EQ(cache->cached_bytes(), 1ull << 20);
  {
    auto reader = cache->Acquire(1 << 20, false);  // a reader: overwritten by its fetch
    ASSERT_TRUE(reader.ok());
    EXPECT_EQ((*reader)->data(), first);
    EXPECT_EQ(cache->reused(), 1u);
  }
  {
    auto writer = cache->Acquire(1 << 20, true);  // a writer: zeros, not the last chunk
    ASSERT_TRUE(writer.ok());
    EXPECT_EQ((*writer)->data(), first);
    const uint8_t *d = (*writer)->data();
    EXPECT_TRUE(std::all_of(d, d + (1 << 20), [](uint8_t x) { return x == 0; }));
  }
  // A buffer more than twice the size asked is not handed to a small chunk.
  {
    auto small = cache->Acquire(4096, false);
    ASSERT_TRUE(small.ok());
    EXPECT_NE((*small)->data(), first);
  }
  // Four 1 MiB buffers given back: only 3 MiB are kept.
  {
    std::vector<std::unique_ptr<maru::StagingCache::Buffer>> held;
    for (int i = 0; i < 4; ++i) held.push_back(std::move(*cache->Acquire(1 << 20, false)));
  }
  EXPECT_LE(cache->cached_bytes(), 3ull << 20);
  auto late = cache->Acquire(1 << 20, false);
  ASSERT_TRUE(late.ok());
  cache->Close();
  EXPECT_EQ(cache->cached_bytes(), 0u);
  late->reset();  // after Close: freed, not cached
  EXPECT_EQ(cache->cached_bytes(), 0u);
}

// What a registration per extent costs the agent, fresh and cached (printed,
// not asserted: docs/design.md quotes the figures), and that a cached key is
// the registration made first, kept until its time is over.
TEST(Agent, RegistrationCost) {
  setenv("UCX_TLS", "tcp", 1);
  unsetenv("UCX_NET_DEVICES");  // a deleted veth of an earlier test
  auto ucx = maru::UcxWorker::Create();
  ASSERT_TRUE(ucx.ok());
  constexpr uint64_t kExtent = 2ull << 20, kCount = 64;
  std::vector<uint8_t> memory(kExtent * kCount);
  maru::ExtentRegistry registry((*ucx)->context());
  for (bool writable : {false, true}) {
    std::vector<const std::vector<uint8_t> *> keys;
    int64_t start = maru::MonotonicNs();
    for (uint64_t i = 0; i < kCount; ++i) {
      auto key = registry.Key(0, memory.data(), i * kExtent, kExtent, writable, 1);
      ASSERT_TRUE(key.ok());
      ASSERT_FALSE((*key)->empty());
      keys.push_back(*key);
    }
    const int64_t fresh = maru::MonotonicNs() - start;
    EXPECT_EQ(registry.size(), kCount);
    start = maru::MonotonicNs();
    for (int round = 0; round < 10; ++round)
      for (uint64_t i = 0; i < kCount; ++i) {
        auto key = registry.Key(0, memory.data(), i * kExtent, kExtent, writable, 1);
        ASSERT_TRUE(key.ok());
        ASSERT_EQ(*key, keys[i]);  // the registration made first, not a new one
      }
    const int64_t cached = (maru::MonotonicNs() - start) / 10;
    EXPECT_EQ(registry.size(), kCount);
    registry.Expire(0);  // their time is not over: all are kept
    EXPECT_EQ(registry.size(), kCount);
    start = maru::MonotonicNs();
    registry.Expire(2);
    const int64_t unmapped = maru::MonotonicNs() - start;
    printf("%s 2 MiB extent: ucp_mem_map+rkey_pack %.1f us, cached %.2f us, unmap %.1f us\n",
           writable ? "writable" : "read-only", fresh / 1e3 / kCount, cached / 1e3 / kCount,
           unmapped / 1e3 / kCount);
    EXPECT_EQ(registry.size(), 0u);
  }
}

TEST(RemotePools, OneAgentPerDeviceOfThePool) {
  setenv("UCX_TLS", "tcp", 1);
  NetNs ns;
  setenv("UCX_NET_DEVICES", ns.host_if().c_str(), 1);
  ASSERT_TRUE(ns.ok());
  TestPool a(64ull << 20), b(64ull << 20);
  const int port = 30000 + (getpid() * 17 + 7) % 20000;
  Server server(a.path(), {"--pool", b.path(), "--listen",
                           "tcp://" + ns.host_ip() + ":" + std::to_string(port), "--high-watermark",
                           "1", "--low-watermark", "1"});
  ASSERT_TRUE(server.Start());
  Agent first(a.path(), server.address(), "tcp://" + ns.host_ip() + ":0");
  Agent second(b.path(), server.address(), "tcp://" + ns.host_ip() + ":0");
  ASSERT_TRUE(first.Start());
  ASSERT_TRUE(second.Start());
  // 96 MiB in chunks of 8: more than either device holds, so both serve.
  std::string store, read;
  for (int i = 0; i < 12; ++i) {
    store += " + store /two/c" + std::to_string(i) + " 8388608";
    read += " + read-into /two/c" + std::to_string(i) + " 8388608";
  }
  std::string remote =
      "env UCX_TLS=tcp MARU_DATA=remote " + ns.Exec() +
      maru_test::ClientCommand("tcp://" + ns.host_ip() + ":" + std::to_string(port), "");
  std::string out;
  ASSERT_EQ(maru_test::Run(remote + store.substr(3) + read, &out), 0) << out;
  std::string load;
  for (int i = 0; i < 12; ++i) load += " + load /two/c" + std::to_string(i) + " 8388608 /dev/shm/";
  EXPECT_EQ(maru_test::RunClient(server.address(), load.substr(3)), 0);
  // Both devices hold chunks, so each agent served some of the transfers.
  std::string df;
  maru_test::Run(maru_test::MaructlBinary() + " df --json --server " + server.address(), &df);
  EXPECT_NE(df.find("\"index\":1"), std::string::npos) << df;
  EXPECT_EQ(df.find("\"used\":0}"), std::string::npos) << df;
}

}  // namespace
