// A pool's leader lost in each way a leader is lost, under a writer's load:
// three hosts (network and mount namespaces), a maru-server on each (one
// leads, two follow as hot standbys through the pool's replication log),
// three etcd members on the hosts' own addresses. After each loss another
// server leads at a higher epoch, the writer (on another host, given the
// list of servers) goes on, and every chunk it sealed reads back bit-exact.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>

#include "ha_group.h"
#include "harness.h"
#include "helpers/etcd_cluster.h"

namespace {

using maru_test::HaGroup;
using maru_test::WaitFor;

constexpr uint64_t kChunk = 64u << 10;

size_t Lines(const std::string &path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

class FailoverTest : public ::testing::Test {
 protected:
  // The leader's lease: a test may need a longer one.
  virtual int LeaseTtlS() const { return 1; }
  void SetUp() override {
    group_ = std::make_unique<HaGroup>(LeaseTtlS());
    ASSERT_TRUE(group_->ok());
    ASSERT_TRUE(group_->Start());
    leader_ = group_->Leader();
    ASSERT_GE(leader_, 0);
    epoch_ = group_->EpochOf(leader_);
    EXPECT_GT(epoch_, 0u) << group_->Logs();
    writer_host_ = (leader_ + 1) % 3;
  }

  // Starts a writer on a host that does not lead: `count` chunks stored
  // one by one through the server list, each sealed path logged.
  void StartWriter(int count) {
    writer_ = maru_test::Fork([this, count] {
      return group_->RunClientOn(writer_host_, "store-log /ha " + std::to_string(count) + " " +
                                                   std::to_string(kChunk) + " " + log_path());
    });
  }
  bool WaitForStored(size_t n) {
    return WaitFor([&] { return Lines(log_path()) >= n; }, 30000);
  }
  // The writer finished, and every chunk it logged reads back bit-exact
  // from a third host.
  void ExpectEverythingStored(int count) {
    ASSERT_EQ(maru_test::Wait(writer_), 0) << group_->Logs();
    EXPECT_EQ(Lines(log_path()), static_cast<size_t>(count));
    std::string out;
    EXPECT_EQ(group_->RunClientOn((writer_host_ + 1) % 3,
                                  "verify-log " + log_path() + " " + std::to_string(kChunk), &out),
              0)
        << out << group_->Logs();
  }
  std::string log_path() const { return dir_.path() + "/stored"; }

  maru_test::TempDir dir_;
  std::unique_ptr<HaGroup> group_;
  int leader_ = -1, writer_host_ = -1;
  uint64_t epoch_ = 0;
  pid_t writer_ = -1;
};

// What an operator sees: the leader at its epoch, the pool fenced at it,
// two standbys not behind.
TEST_F(FailoverTest, ClusterStatusShowsTheLeaderAndItsStandbys) {
  std::string out;
  ASSERT_EQ(maru_test::Run(maru_test::MaructlBinary() + " cluster status --json --pool " +
                               group_->pool() + " --etcd " + group_->etcd().endpoints(),
                           &out),
            0)
      << out;
  const std::string leader = "\"id\":\"h" + std::to_string(leader_) + "\"";
  EXPECT_NE(out.find("\"leader\":{" + leader), std::string::npos) << out;
  EXPECT_NE(out.find("\"fence_epoch\":" + std::to_string(epoch_)), std::string::npos) << out;
  for (int i = 0; i < 3; ++i)
    EXPECT_NE(out.find("\"id\":\"h" + std::to_string(i) + "\""), std::string::npos) << out;
  // The leader's own stats (what marutop and /metrics show) list them too.
  ASSERT_TRUE(WaitFor([&] {
    maru_test::Run(group_->host(writer_host_).Exec() + group_->ClientEnv() +
                       maru_test::MaructlBinary() + " stats --json --server " + group_->servers(),
                   &out);
    return out.find("\"servers\"") != std::string::npos;
  })) << out;
  EXPECT_NE(out.find("\"leader_epoch\":" + std::to_string(epoch_)), std::string::npos) << out;
  const size_t at = out.find("\"id\":\"h" + std::to_string(leader_) + "\"");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_EQ(out.find("\"leads\":true", at), out.find("\"leads\"", at)) << out;
  // etcd gone: said in one line, and a non-zero exit.
  group_->etcd().KillAll();
  EXPECT_NE(maru_test::Run(maru_test::MaructlBinary() + " cluster status --pool " + group_->pool() +
                               " --etcd " + group_->etcd().endpoints(),
                           &out),
            0);
  EXPECT_NE(out.find("etcd         unreachable"), std::string::npos) << out;
}

TEST_F(FailoverTest, KillNineOfTheLeaderUnderLoad) {
  StartWriter(200);
  ASSERT_TRUE(WaitForStored(40));
  group_->server(leader_).Kill9();
  const int next = group_->WaitForNewLeader(leader_);
  ASSERT_GE(next, 0) << group_->Logs();
  EXPECT_GT(group_->EpochOf(next), epoch_);
  ExpectEverythingStored(200);
  // The old leader comes back as a standby and catches up.
  ASSERT_TRUE(group_->StartStandby(leader_)) << group_->Logs();
}

TEST_F(FailoverTest, ALeaderFrozenPastItsLeaseNeverWritesAgain) {
  StartWriter(150);
  ASSERT_TRUE(WaitForStored(30));
  ASSERT_TRUE(maru_test::Freeze(group_->server(leader_).pid()));
  const int next = group_->WaitForNewLeader(leader_);
  ASSERT_GE(next, 0) << group_->Logs();
  ASSERT_TRUE(WaitForStored(60));  // the new leader serves the writer
  group_->server(leader_).Thaw();
  // It finds its lease gone, or the pool fenced past its epoch, before any
  // write, and stops for its service to restart it as a standby.
  int code = -1;
  ASSERT_TRUE(WaitFor([&] { return (code = group_->server(leader_).Exited()) >= 0; }))
      << group_->Logs();
  EXPECT_EQ(code, 75) << group_->Logs();
  ExpectEverythingStored(150);
}

TEST_F(FailoverTest, ALeaderCutFromTheNetworkStepsDown) {
  StartWriter(150);
  ASSERT_TRUE(WaitForStored(30));
  ASSERT_TRUE(group_->host(leader_).Cut());
  const int next = group_->WaitForNewLeader(leader_);
  ASSERT_GE(next, 0) << group_->Logs();
  EXPECT_GT(group_->EpochOf(next), epoch_);
  int code = -1;
  ASSERT_TRUE(WaitFor([&] { return (code = group_->server(leader_).Exited()) >= 0; }))
      << group_->Logs();
  EXPECT_EQ(code, 75) << group_->Logs();
  ExpectEverythingStored(150);
  ASSERT_TRUE(group_->host(leader_).Reconnect());
}

// With a 1 s lease, losing the etcd member that leads etcd's own raft can
// cost the leader its lease (etcd elects a new raft leader within its
// election timeout, the lease's margin is a quarter second): one safe
// failover. A 2 s lease rides it out, and nothing changes (docs/ha.md).
class FailoverTestTwoSecondLease : public FailoverTest {
 protected:
  int LeaseTtlS() const override { return 2; }
};

TEST_F(FailoverTestTwoSecondLease, OneEtcdMemberLostChangesNothing) {
  StartWriter(150);
  ASSERT_TRUE(WaitForStored(30));
  group_->etcd().Kill(leader_);  // the member on the leader's own host
  ASSERT_TRUE(WaitForStored(60));
  EXPECT_EQ(group_->Leader(), leader_);
  // Two members are a quorum: a failover still happens.
  group_->server(leader_).Kill9();
  const int next = group_->WaitForNewLeader(leader_);
  ASSERT_GE(next, 0) << group_->Logs();
  ExpectEverythingStored(150);
}

TEST_F(FailoverTest, AllEtcdMembersLostStopsWritesAndFailoversNotReads) {
  StartWriter(40);
  ExpectEverythingStored(40);
  // A reader holds a sealed chunk across the loss.
  const std::string go = dir_.path() + "/go";
  const std::string held = dir_.path() + "/held";
  const std::string size = std::to_string(kChunk);
  ASSERT_EQ(group_->RunClientOn(writer_host_, "store /ha/held " + size), 0);
  pid_t reader = maru_test::Fork([&] {
    return group_->RunClientOn(writer_host_,
                               "hold-read /ha/held " + size + " " + go + " > " + held);
  });
  ASSERT_TRUE(WaitFor([&] { return Lines(held) >= 1; }));
  group_->etcd().KillAll();
  // The leader cannot renew its lease: it stops before anyone could have
  // been elected, and nobody is.
  int code = -1;
  ASSERT_TRUE(WaitFor([&] { return (code = group_->server(leader_).Exited()) >= 0; }))
      << group_->Logs();
  EXPECT_EQ(code, 75);
  EXPECT_EQ(group_->Leader(), -1);
  std::ofstream(go) << "";
  EXPECT_EQ(maru_test::Wait(reader), 0);
  std::ifstream in(held);
  std::string opened, read;
  std::getline(in, opened);
  std::getline(in, read);
  EXPECT_EQ(read, "read ok");
}

}  // namespace

namespace {

using maru_test::Server;
using maru_test::TestPool;

// Without etcd, one server leads a pool: a second is refused while the
// first lives, and a pool once led through etcd is refused to both.
TEST(LeadAloneTest, ASecondServerWithoutEtcdIsRefused) {
  TestPool pool;
  Server first(pool.path());
  ASSERT_TRUE(first.Start()) << first.log();
  Server second(pool.path());
  std::string out;
  EXPECT_NE(second.RunToExit(&out), 0);
  EXPECT_NE(out.find("another maru-server"), std::string::npos) << out;
  first.Kill9();  // gone: the next one is not refused
  ASSERT_TRUE(second.Start()) << second.log();
}

TEST(LeadAloneTest, APoolFencedAheadIsRefused) {
  TestPool pool(256ull << 20, 64u << 10, "", "--log-size 4M");
  maru_test::EtcdCluster etcd(1);
  ASSERT_TRUE(etcd.Start());
  ASSERT_TRUE(maru_test::RaisePoolFence(pool.path(), 1000));
  // Through etcd: the epoch etcd gives (1) is behind the pool's.
  Server elected(pool.path(), {"--etcd", etcd.endpoints(), "--member", "a"});
  std::string out;
  EXPECT_NE(elected.RunToExit(&out), 0);
  EXPECT_NE(out.find("ahead"), std::string::npos) << out;
  // Without etcd: the pool is led through it.
  Server alone(pool.path());
  EXPECT_NE(alone.RunToExit(&out), 0);
  EXPECT_NE(out.find("--etcd"), std::string::npos) << out;
}

}  // namespace
