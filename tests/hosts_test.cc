// Several hosts on one pool, emulated on this machine: each host is a
// network namespace with its own address on a private network and a mount
// namespace of its own; all of them map the one pool file in /dev/shm, as
// hosts behind a CXL switch map one device. maru-server runs on host 0 and
// listens on TCP (with a token) at host 0's address; the other hosts reach
// it over the network only, with their own client processes and their own
// fuse.maru mounts, or through an agent on host 0 as a host without the
// pool would.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"
#include "pattern.h"

namespace {

using maru_test::FuseMount;
using maru_test::Hosts;
using maru_test::NetNs;
using maru_test::Server;
using maru_test::TestPool;

constexpr int kPort = 7411;  // free in host 0's namespace, whatever runs on this machine
constexpr uint64_t kSize = (3u << 20) + 4096 + 8;  // more than one unit, not a multiple of it

std::string Slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string &path, const std::string &data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

std::string Pattern(const std::string &key, uint64_t size) {
  std::string data(size, '\0');
  maru_test::FillPattern(data.data(), size, key);
  return data;
}

bool IsFuseMount(const std::string &path) {
  struct statfs st;
  return statfs(path.c_str(), &st) == 0 && st.f_type == 0x65735546;  // FUSE_SUPER_MAGIC
}

// Whether `text` (a mount point, an interface) is in this namespace's view.
bool InMountTable(const std::string &mountpoint) {
  return Slurp("/proc/self/mountinfo").find(" " + mountpoint + " ") != std::string::npos;
}

std::string Output(const std::string &command) {
  std::string out;
  maru_test::Run(command, &out);
  return out;
}

// Three hosts, the server on host 0, a mount on each of hosts 1 and 2. Its
// members are destroyed in reverse: mounts, server, then the hosts.
class HostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(hosts_.ok());
    const std::string d = dir_.path();
    // A mount is its host's root daemon, acting for each caller: it needs a
    // root identity (a token of uid 0), which may assert others. An
    // engine's client is an ordinary user.
    std::ofstream(d + "/tokens") << "hosts-test-mount-token 0:0\n"
                                 << "hosts-test-client-token 1001:1001\n";
    ASSERT_EQ(chmod((d + "/tokens").c_str(), 0600), 0);
    std::ofstream(d + "/mount-token") << "hosts-test-mount-token\n";
    std::ofstream(d + "/client-token") << "hosts-test-client-token\n";
    // Every mount a test starts, on any host, inherits it.
    setenv("MARU_TOKEN_FILE", (d + "/mount-token").c_str(), 1);
    address_ = "tcp://" + hosts_[0].ip() + ":" + std::to_string(kPort);
    server_ = std::make_unique<Server>(
        pool_.path(),
        std::vector<std::string>{"--listen", address_, "--token-file", d + "/tokens"});
    server_->RunOn(&hosts_[0]);
    ASSERT_TRUE(server_->Start());
    // The server answers on its Unix socket before it reaches the TCP
    // listener: a host's client waits until it is served over the network.
    ASSERT_TRUE(maru_test::WaitFor([&] { return Client(1, "connect") == 0; }, 30000))
        << server_->log();
    for (int h : {1, 2}) {
      mounts_[h] = std::make_unique<FuseMount>(address_);
      mounts_[h]->RunOn(&hosts_[h]);
      ASSERT_TRUE(mounts_[h]->Start()) << "host " << h;
    }
  }

  void TearDown() override {
    unsetenv("MARU_TOKEN_FILE");
    unsetenv("UCX_TLS");
  }

  // Runs a libmaru_direct script (tests/helpers/direct_client) on host `h`.
  // `env`: more VAR=VALUE settings for it.
  int Client(int h, const std::string &script, std::string *out = nullptr,
             const std::string &env = "") {
    return maru_test::Run(hosts_[h].Exec() + env + "MARU_TOKEN_FILE=" + dir_.path() +
                              "/client-token " + maru_test::ClientCommand(address_, script),
                          out);
  }

  // Runs a shell command on host `h`.
  int Shell(int h, const std::string &command, std::string *out = nullptr) {
    return maru_test::Run(hosts_[h].Exec() + "sh -c '" + command + "'", out);
  }

  // `rel` in host h's mount, as host h names it.
  std::string M(int h, const std::string &rel) { return *mounts_[h] / rel; }

  Hosts hosts_{3};
  maru_test::TempDir dir_;
  TestPool pool_{128ull << 20};
  std::unique_ptr<Server> server_;
  std::unique_ptr<FuseMount> mounts_[3];
  std::string address_;
};

TEST_F(HostsTest, EachHostHasItsOwnAddressAndReachesTheServerOverTheNetwork) {
  for (int h = 0; h < 3; ++h) {
    std::string out;
    ASSERT_EQ(maru_test::Run(hosts_[h].Exec() + "ip -4 -o addr show dev eth0", &out), 0) << out;
    EXPECT_NE(out.find(" " + hosts_[h].ip() + "/"), std::string::npos) << out;
  }
  EXPECT_NE(hosts_[1].ip(), hosts_[2].ip());
  // The server's address is not one of the machine's: only hosts on the
  // network reach it.
  EXPECT_EQ(Output("ip -4 -o addr show").find(" " + hosts_[0].ip() + "/"), std::string::npos);
  std::string out;
  EXPECT_EQ(Client(2, "connect", &out), 0) << out;
}

TEST_F(HostsTest, AChunkStoredOnOneHostReadsBackBitExactOnAnother) {
  // The C API on host 1, the C API on host 2: mapped in place from the pool.
  std::string out;
  ASSERT_EQ(Client(1, "store /shared/api " + std::to_string(kSize), &out), 0) << out;
  EXPECT_EQ(Client(2, "load /shared/api " + std::to_string(kSize) + " " + pool_.path(), &out), 0)
      << out;
  EXPECT_EQ(Client(2, "read-into /shared/api " + std::to_string(kSize), &out), 0) << out;

  // ... and through host 2's mount.
  const std::string expected = dir_.path() + "/api.expected";
  WriteFile(expected, Pattern("/shared/api", kSize));
  EXPECT_EQ(Shell(2, "cmp " + expected + " " + M(2, "shared/api"), &out), 0) << out;

  // Host 1's mount, read back through host 2's mount and host 2's C API.
  const std::string source = dir_.path() + "/fs.source";
  WriteFile(source, Pattern("/shared/fs", kSize));
  ASSERT_EQ(Shell(1, "cp " + source + " " + M(1, "shared/fs"), &out), 0) << out;
  EXPECT_EQ(Shell(2, "cmp " + source + " " + M(2, "shared/fs"), &out), 0) << out;
  EXPECT_EQ(Client(2, "fetch /shared/fs " + std::to_string(kSize), &out), 0) << out;
}

TEST_F(HostsTest, ALookupOnOneHostFindsWhatAnotherPublished) {
  std::string out;
  ASSERT_EQ(Client(1, "store-batch 65536 /prefix/b0 /prefix/b1 /prefix/b2", &out), 0) << out;
  // The longest cached prefix of four blocks is the three host 1 stored,
  // each holding host 1's bytes.
  EXPECT_EQ(Client(2, "lookup 3 /prefix/b0 /prefix/b1 /prefix/b2 /prefix/b3", &out), 0) << out;
  EXPECT_EQ(Client(2, "count 3 /prefix/b0 /prefix/b1 /prefix/b2 /prefix/b3", &out), 0) << out;
  // A name host 2 never saw published is not found by host 1 either.
  EXPECT_EQ(Client(1, "open-errno /prefix/b3 " + std::to_string(ENOENT), &out), 0) << out;
}

TEST_F(HostsTest, EachMountIsSeenOnItsHostOnly) {
  for (int h : {1, 2}) {
    const std::string mnt = mounts_[h]->path();
    EXPECT_TRUE(IsFuseMount(hosts_[h].Path(mnt))) << "host " << h << " does not see its mount";
    EXPECT_FALSE(IsFuseMount(mnt)) << "host " << h << "'s mount is seen outside it";
    EXPECT_FALSE(InMountTable(mnt));
    std::string out;
    EXPECT_EQ(maru_test::Run(hosts_[h].Exec() + "mountpoint -q " + mnt, &out), 0) << out;
    const int other = h == 1 ? 2 : 1;
    EXPECT_FALSE(IsFuseMount(hosts_[other].Path(mnt))) << "host " << other << " sees " << h;
    EXPECT_NE(maru_test::Run(hosts_[other].Exec() + "mountpoint -q " + mnt), 0);
  }
}

TEST_F(HostsTest, AHostThatDoesNotMapThePoolGoesThroughAnAgent) {
  // The agent runs on host 0, beside the server, and serves the pool at
  // host 0's address; UCX carries the bytes over the network (TCP).
  setenv("UCX_TLS", "tcp", 1);
  maru_test::Agent agent(pool_.path(), server_->address(), "tcp://" + hosts_[0].ip() + ":0");
  agent.RunOn(&hosts_[0]);
  ASSERT_TRUE(agent.Start());
  EXPECT_NE(agent.address().find(hosts_[0].ip()), std::string::npos) << agent.address();
  const std::string remote = "UCX_TLS=tcp MARU_DATA=remote ";
  const std::string size = std::to_string(kSize);
  std::string out;
  // Host 1 writes through the agent, host 2 reads in place; and back.
  ASSERT_EQ(Client(1, "store /agent/put " + size, &out, remote), 0) << out << agent.log();
  EXPECT_EQ(Client(2, "load /agent/put " + size + " " + pool_.path(), &out), 0) << out;
  ASSERT_EQ(Client(2, "store /agent/get " + size, &out), 0) << out;
  EXPECT_EQ(Client(1, "fetch /agent/get " + size, &out, remote), 0) << out << agent.log();
  EXPECT_EQ(Client(1, "read-into /agent/get " + size, &out, remote), 0) << out << agent.log();
}

// What a test leaves on the machine while it runs, to check that it is
// gone afterwards.
struct Traces {
  std::vector<std::string> namespaces, mountpoints;
  std::vector<pid_t> pids;
  std::string root_if;

  void Write(const std::string &path) const {
    std::ofstream out(path);
    for (const auto &n : namespaces) out << "ns " << n << "\n";
    for (const auto &m : mountpoints) out << "mnt " << m << "\n";
    for (pid_t p : pids) out << "pid " << p << "\n";
    out << "if " << root_if << "\n";
  }
  static Traces Read(const std::string &path) {
    Traces t;
    std::ifstream in(path);
    std::string what, value;
    while (in >> what >> value) {
      if (what == "ns") t.namespaces.push_back(value);
      if (what == "mnt") t.mountpoints.push_back(value);
      if (what == "pid") t.pids.push_back(static_cast<pid_t>(std::stol(value)));
      if (what == "if") t.root_if = value;
    }
    return t;
  }
};

// Records what the fixture made, into the file $MARU_HOSTS_TRACES.
Traces Record(Hosts &hosts, Server &server, std::unique_ptr<FuseMount> *mounts) {
  Traces t;
  for (int h = 0; h < hosts.size(); ++h) {
    t.namespaces.push_back(hosts[h].name());
    t.pids.push_back(hosts[h].holder());
  }
  t.pids.push_back(server.pid());
  for (int h : {1, 2}) {
    t.mountpoints.push_back(mounts[h]->path());
    t.pids.push_back(mounts[h]->pid());
  }
  t.namespaces.push_back(hosts.lan().name());
  t.root_if = hosts.lan().root_if();
  return t;
}

void ExpectGone(const Traces &t) {
  ASSERT_FALSE(t.namespaces.empty());
  const std::string netns = Output("ip netns list");
  for (const auto &n : t.namespaces) EXPECT_EQ(netns.find(n), std::string::npos) << n;
  const std::string links = Output("ip -o link show");
  EXPECT_EQ(links.find(" " + t.root_if + "@"), std::string::npos) << links;
  for (const auto &m : t.mountpoints) {
    EXPECT_FALSE(InMountTable(m)) << m;
    EXPECT_NE(access(m.c_str(), F_OK), 0) << m << " still exists";
  }
  // No process of the test lives on (a zombie is not one: its parent, the
  // test, is gone).
  for (pid_t p : t.pids) {
    const std::string stat = Slurp("/proc/" + std::to_string(p) + "/stat");
    EXPECT_TRUE(stat.empty() || stat.find(") Z ") != std::string::npos) << "pid " << p;
  }
}

// The part of the next test that fails on purpose, in a process of its own;
// skipped when run without it.
TEST_F(HostsTest, FailsOnPurposeForTheCleanupTest) {
  const char *traces = getenv("MARU_HOSTS_TRACES");
  if (!traces) GTEST_SKIP() << "run by CleanupAfterAFailedAssertion only";
  Record(hosts_, *server_, mounts_).Write(traces);
  ASSERT_TRUE(false) << "failing on purpose";
}

TEST(HostsCleanup, RemovesNamespacesInterfacesMountsAndProcesses) {
  Traces t;
  {
    // A fixture run as gtest runs it, without the test's body.
    class Run : public HostsTest {
     public:
      void TestBody() override {}
      Traces Go() {
        SetUp();
        Traces made = HasFatalFailure() ? Traces{} : Record(hosts_, *server_, mounts_);
        TearDown();
        return made;
      }
    } run;
    t = run.Go();
    ASSERT_FALSE(HasFatalFailure());
  }
  ExpectGone(t);
}

TEST(HostsCleanup, AfterAFailedAssertion) {
  maru_test::TempDir dir;
  const std::string traces = dir.path() + "/traces";
  std::string out;
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const int rc = maru_test::Run("MARU_HOSTS_TRACES=" + traces + " " + self +
                                    " --gtest_filter=HostsTest.FailsOnPurposeForTheCleanupTest",
                                &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("failing on purpose"), std::string::npos) << out;
  ExpectGone(Traces::Read(traces));
}

}  // namespace
