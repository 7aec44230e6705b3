// Leader election and fencing against real etcd: three etcd members on
// loopback (helpers/etcd_cluster.h), candidates as separate processes
// (helpers/ha_candidate.cc) that are killed, frozen and cut off from etcd.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>

#include "alloc/pool_device.h"
#include "ha/etcd_client.h"
#include "ha/leader_election.h"
#include "ha/leader_gate.h"
#include "ha/leadership.h"
#include "harness.h"
#include "helpers/etcd_cluster.h"

using namespace maru_test;

namespace {

// A pool (with its control page) that the candidates lead, and a file that
// stands in for a structure they share in it: word E counts the writes made
// under epoch E.
class LedPool {
 public:
  LedPool() : shared_("/dev/shm/" + UniqueName("maru-ha-shared")) {
    device_ = std::move(*maru::PoolDevice::Open(pool_.path(), maru::PoolDevice::OpenOptions()));
    control_ = std::make_unique<maru::PoolControl>(
        *maru::PoolControl::At(device_->base(), device_->superblock()));
    int fd = open(shared_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, 4096) < 0) abort();
    map_ = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (map_ == MAP_FAILED) abort();
  }
  ~LedPool() {
    munmap(map_, 4096);
    unlink(shared_.c_str());
  }
  const std::string &path() const { return pool_.path(); }
  const std::string &shared() const { return shared_; }
  std::string uuid() const { return maru::UuidToString(device_->superblock().pool_uuid); }
  maru::PoolControl &control() { return *control_; }
  uint64_t epoch() { return control_->FenceEpoch(); }
  uint64_t writes(uint64_t epoch) {
    return static_cast<std::atomic<uint64_t> *>(map_)[epoch].load();
  }

 private:
  TestPool pool_{64ull << 20};
  std::unique_ptr<maru::PoolDevice> device_;
  std::unique_ptr<maru::PoolControl> control_;
  std::string shared_;
  void *map_;
};

// One ha_candidate process; killed on destruction if still running.
class Candidate {
 public:
  Candidate(const std::string &etcd, LedPool &pool, const std::string &id,
            std::vector<std::string> extra = {})
      : log_(dir_.path() + "/out") {
    std::vector<std::string> args = {BinDir("tests/ha_candidate"),
                                     "--etcd",
                                     etcd,
                                     "--pool",
                                     pool.path(),
                                     "--id",
                                     id,
                                     "--shared",
                                     pool.shared()};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = SpawnLogged(std::move(args), log_);
  }
  ~Candidate() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  std::string output() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  bool Said(const std::string &line) const {
    return ("\n" + output()).find("\n" + line) != std::string::npos;
  }
  // The epoch it leads with, 0 if it does not lead (yet).
  uint64_t led() const {
    const std::string out = "\n" + output();
    size_t at = out.rfind("\nleader ");
    return at == std::string::npos ? 0 : std::stoull(out.substr(at + 8));
  }
  // The renewals it last reported.
  int64_t renewed() const {
    const std::string out = "\n" + output();
    size_t at = out.rfind("\nrenewed ");
    return at == std::string::npos ? 0 : std::stoll(out.substr(at + 9));
  }
  void Kill9() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  bool Exited() {
    if (pid_ <= 0) return true;
    int status;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
    code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    pid_ = -1;
    return true;
  }
  int code() const { return code_; }
  pid_t pid() const { return pid_; }

 private:
  TempDir dir_;
  std::string log_;
  pid_t pid_ = -1;
  int code_ = -1;
};

std::unique_ptr<maru::EtcdClient> ClientOf(const std::string &endpoints, int64_t timeout = 1000) {
  maru::EtcdOptions options;
  options.endpoints = maru::ParseEtcdEndpoints(endpoints);
  options.call_timeout_ms = timeout;
  auto c = maru::EtcdClient::Create(options);
  return c.ok() ? std::move(*c) : nullptr;
}

// Exactly one of `all` leads; its index, or -1.
int OnlyLeader(std::vector<std::unique_ptr<Candidate>> &all) {
  int leader = -1;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i]->led() == 0) continue;
    if (leader >= 0) return -2;
    leader = static_cast<int>(i);
  }
  return leader;
}

class HaTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(etcd_.Start()); }
  std::vector<std::unique_ptr<Candidate>> Three(std::vector<std::string> extra = {}) {
    std::vector<std::unique_ptr<Candidate>> all;
    for (int i = 0; i < 3; ++i)
      all.push_back(
          std::make_unique<Candidate>(etcd_.endpoints(), pool_, "s" + std::to_string(i), extra));
    return all;
  }

  EtcdCluster etcd_{3};
  LedPool pool_;
};

TEST_F(HaTest, ClientKvTxnAndLeases) {
  auto c = ClientOf(etcd_.endpoints());
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->Put("/t/a", "1").ok());
  auto a = c->Get("/t/a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->value, "1");
  EXPECT_EQ(c->Get("/t/none")->version, 0);

  // Compare-and-put: only the writer that read the current revision wins.
  maru::EtcdCompare same{"/t/a", maru::EtcdCompare::kMod, maru::EtcdCompare::kEqual,
                         a->mod_revision, ""};
  maru::EtcdOp put{maru::EtcdOp::kPut, "/t/a", "2", 0, false};
  maru::EtcdOp get{maru::EtcdOp::kGet, "/t/a", "", 0, false};
  auto first = c->Txn({same}, {put}, {get});
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->succeeded);
  auto second = c->Txn({same}, {put}, {get});
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->succeeded);
  ASSERT_EQ(second->gets.size(), 1u);
  EXPECT_EQ(second->gets[0][0].value, "2");

  // A key under a lease goes with it.
  auto lease = c->LeaseGrant(1);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(lease->ttl_s, 1);  // the members allow 1 s (etcd_cluster.h)
  ASSERT_TRUE(c->Put("/t/leased", "x", lease->id).ok());
  EXPECT_TRUE(c->LeaseKeepAlive(lease->id).ok());
  EXPECT_TRUE(c->LeaseTimeToLive(lease->id).ok());
  ASSERT_TRUE(c->LeaseRevoke(lease->id).ok());
  EXPECT_EQ(c->Get("/t/leased")->version, 0);
  EXPECT_EQ(c->LeaseKeepAlive(lease->id).status().errnum(), ENOENT);
  EXPECT_EQ(c->GetPrefix("/t/")->size(), 1u);
  ASSERT_TRUE(c->Delete("/t/a").ok());
  EXPECT_EQ(c->GetPrefix("/t/")->size(), 0u);
}

TEST_F(HaTest, ClientMovesPastDeadEndpoints) {
  // The first endpoint refuses connections: the call goes to the next.
  const std::string dead = "127.0.0.1:" + std::to_string(FreePort());
  auto c = ClientOf(dead + "," + etcd_.endpoint(1), 2000);
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->Put("/t/x", "y").ok());
  EXPECT_EQ(c->Get("/t/x")->value, "y");
}

// A server's leadership: one of two opens its gate and fences the pool; the
// other refuses calls naming it; when the first leaves, the second leads
// with a higher epoch and the first may write no more.
TEST_F(HaTest, LeadershipOpensOneGateAndHandsOver) {
  auto options = [&](const std::string &id) {
    maru::ElectionOptions o;
    o.etcd.endpoints = maru::ParseEtcdEndpoints(etcd_.endpoints());
    o.pool = pool_.uuid();
    o.id = id;
    o.endpoint = "unix:///run/" + id + ".sock";
    return o;
  };
  maru::LeaderGate gate_a, gate_b;
  std::atomic<int> lost_a{0};
  auto a = maru::Leadership::Start(options("a"), pool_.control(), &gate_a,
                                   {nullptr, [&] { lost_a.fetch_add(1); }});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(WaitFor([&] { return gate_a.leading(); }));
  auto b = maru::Leadership::Start(options("b"), pool_.control(), &gate_b, {});
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const uint64_t first = (*a)->epoch();
  EXPECT_TRUE((*a)->MayWrite());
  EXPECT_EQ(pool_.epoch(), first);
  EXPECT_EQ(pool_.control().Leader().id, "a");
  ASSERT_TRUE(WaitFor([&] {
    return gate_b.Refusal().find("unix:///run/a.sock") != std::string::npos;
  })) << gate_b.Refusal();
  EXPECT_FALSE(gate_b.leading());
  EXPECT_FALSE((*b)->MayWrite());

  // The first one's view of the pool, kept past its end.
  maru::PoolControl old = pool_.control();
  a->reset();  // leaves: revokes its lease
  ASSERT_TRUE(WaitFor([&] { return gate_b.leading(); }));
  EXPECT_GT((*b)->epoch(), first);
  EXPECT_TRUE((*b)->MayWrite());
  EXPECT_FALSE(old.Holds(first));
  EXPECT_EQ(pool_.control().Leader().id, "b");
  EXPECT_FALSE(gate_a.leading());
}

TEST(HaStartTest, UnreachableEtcdIsAOneLineError) {
  const std::string nowhere =
      "127.0.0.1:" + std::to_string(FreePort()) + ",127.0.0.1:" + std::to_string(FreePort());
  auto c = ClientOf(nowhere, 500);
  ASSERT_TRUE(c);
  maru::Result<maru::EtcdKeyValue> got = c->Get("/x");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message().find('\n'), std::string::npos);

  LedPool pool;
  Candidate lone(nowhere, pool, "s0");
  ASSERT_TRUE(WaitFor([&] { return lone.Exited(); }, 30000));
  EXPECT_EQ(lone.code(), 2);
  const std::string out = lone.output();
  EXPECT_NE(out.find("etcd"), std::string::npos) << out;
  EXPECT_EQ(out.find('\n'), out.size() - 1) << out;  // one line
}

TEST_F(HaTest, ThreeCandidatesOneLeader) {
  auto all = Three();
  ASSERT_TRUE(WaitFor([&] { return OnlyLeader(all) >= 0; }));
  const int leader = OnlyLeader(all);
  ASSERT_GE(leader, 0);
  EXPECT_EQ(all[leader]->led(), 1u);
  EXPECT_EQ(pool_.epoch(), 1u);
  // The others are members, and see who leads.
  for (auto &c : all) ASSERT_TRUE(WaitFor([&] { return c->Said("member"); }));
  auto c = ClientOf(etcd_.endpoints());
  auto key = c->Get(maru::LeaderElection::Prefix(pool_.uuid()) + "leader");
  ASSERT_TRUE(key.ok());
  auto info = maru::LeaderElection::ParseLeader(key->value);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->id, "s" + std::to_string(leader));
  EXPECT_EQ(info->epoch, 1u);
  auto members = maru::LeaderElection::ReadMembers(c.get(), pool_.uuid());
  ASSERT_TRUE(members.ok());
  EXPECT_EQ(members->size(), 3u);
  for (const maru::MemberInfo &m : *members) EXPECT_TRUE(m.electable) << m.id;
  auto read = maru::LeaderElection::ReadLeader(c.get(), pool_.uuid());
  ASSERT_TRUE(read.ok() && read->has_value());
  EXPECT_EQ((*read)->id, info->id);
  // It keeps leading: renewals go on, no one else is elected.
  ASSERT_TRUE(WaitFor([&] { return all[leader]->Said("renewed 10"); }));
  EXPECT_EQ(OnlyLeader(all), leader);
}

TEST_F(HaTest, KilledLeaderIsReplacedWithAHigherEpoch) {
  auto all = Three();
  ASSERT_TRUE(WaitFor([&] { return OnlyLeader(all) >= 0; }));
  const int first = OnlyLeader(all);
  const uint64_t first_epoch = all[first]->led();
  all[first]->Kill9();
  all.erase(all.begin() + first);
  ASSERT_TRUE(WaitFor([&] { return OnlyLeader(all) >= 0; }));
  const int second = OnlyLeader(all);
  EXPECT_GT(all[second]->led(), first_epoch);
  EXPECT_EQ(pool_.epoch(), all[second]->led());
}

TEST_F(HaTest, FrozenLeaderIsFencedWhenItWakes) {
  auto all = Three();
  ASSERT_TRUE(WaitFor([&] { return OnlyLeader(all) >= 0; }));
  const int first = OnlyLeader(all);
  const uint64_t old_epoch = all[first]->led();
  ASSERT_TRUE(Freeze(all[first]->pid()));
  const uint64_t writes_when_frozen = pool_.writes(old_epoch);
  // Past its TTL another is elected and raises the pool's epoch.
  int second = -1;
  ASSERT_TRUE(WaitFor([&] {
    for (size_t i = 0; i < all.size(); ++i)
      if (static_cast<int>(i) != first && all[i]->led() > old_epoch) second = static_cast<int>(i);
    return second >= 0;
  }));
  ASSERT_TRUE(WaitFor([&] { return pool_.writes(all[second]->led()) > 0; }));
  kill(all[first]->pid(), SIGCONT);
  // It finds its fence down before any write, and stops.
  ASSERT_TRUE(WaitFor([&] { return all[first]->Exited(); }));
  EXPECT_EQ(all[first]->code(), 5) << all[first]->output();
  EXPECT_TRUE(all[first]->Said("fenced")) << all[first]->output();
  EXPECT_EQ(pool_.writes(old_epoch), writes_when_frozen);
  EXPECT_EQ(pool_.epoch(), all[second]->led());
}

// With a 1 s lease, losing the member that leads raft can cost the leader
// its lease: etcd has no raft leader for up to twice its election timeout,
// longer than a 1 s lease's margin leaves (docs/notes/ha-election.md). A
// 2 s lease rides it out.
TEST_F(HaTest, LosingOneEtcdMemberChangesNothing) {
  auto all = Three({"--ttl", "2"});
  ASSERT_TRUE(WaitFor([&] { return OnlyLeader(all) >= 0; }));
  const int leader = OnlyLeader(all);
  const uint64_t epoch = all[leader]->led();
  const int64_t before = all[leader]->renewed();
  // The worst member to lose: the one that leads raft.
  int raft = -1;
  ASSERT_TRUE(WaitFor([&] { return (raft = etcd_.RaftLeader()) >= 0; }));
  etcd_.Kill(raft);
  // Renewals go on through the two members left; no one else is elected.
  ASSERT_TRUE(WaitFor([&] { return all[leader]->renewed() >= before + 10; }, 30000))
      << all[leader]->output();
  EXPECT_FALSE(all[leader]->Said("lost")) << all[leader]->output();
  EXPECT_EQ(OnlyLeader(all), leader);
  EXPECT_EQ(all[leader]->led(), epoch);
}

TEST_F(HaTest, LosingAllEtcdMembersStopsTheLeaderAndFailovers) {
  auto all = Three({"--give-up", "2000"});
  ASSERT_TRUE(WaitFor([&] { return OnlyLeader(all) >= 0; }));
  for (auto &c : all) ASSERT_TRUE(WaitFor([&] { return c->Said("member"); }));
  const int leader = OnlyLeader(all);
  etcd_.KillAll();
  // The leader stops: it can no longer be sure of its lease.
  ASSERT_TRUE(WaitFor([&] { return all[leader]->Said("lost"); }));
  // Every campaign ends with a clear error; no one else leads.
  for (auto &c : all) {
    ASSERT_TRUE(WaitFor([&] { return c->Exited(); }, 30000)) << c->output();
    EXPECT_EQ(c->code(), 3) << c->output();
    EXPECT_TRUE(c->Said("campaign: campaign gave up: etcd")) << c->output();
  }
  EXPECT_EQ(OnlyLeader(all), leader);
}

TEST_F(HaTest, MemberBehindDoesNotCampaign) {
  Candidate behind(etcd_.endpoints(), pool_, "behind", {"--not-electable"});
  auto c = ClientOf(etcd_.endpoints());
  const std::string key = maru::LeaderElection::Prefix(pool_.uuid()) + "members/behind";
  ASSERT_TRUE(WaitFor([&] {
    auto kv = c->Get(key);
    if (!kv.ok() || kv->version == 0) return false;
    auto m = maru::LeaderElection::ParseMember("behind", kv->value);
    return m && !m->electable;
  }));
  EXPECT_EQ(c->Get(maru::LeaderElection::Prefix(pool_.uuid()) + "leader")->version, 0);
  Candidate ready(etcd_.endpoints(), pool_, "ready");
  ASSERT_TRUE(WaitFor([&] { return ready.led() != 0; }));
  EXPECT_EQ(ready.led(), 1u);  // the first epoch: the one behind never took one
  EXPECT_EQ(behind.led(), 0u);
}

TEST_F(HaTest, PoolEpochAheadRefusesToLead) {
  ASSERT_TRUE(pool_.control().RaiseFence(100).ok());
  Candidate c(etcd_.endpoints(), pool_, "s0");
  ASSERT_TRUE(WaitFor([&] { return c.Exited(); }));
  EXPECT_EQ(c.code(), 4) << c.output();
  EXPECT_TRUE(c.Said("refused: the pool is fenced at epoch 100")) << c.output();
  EXPECT_EQ(pool_.epoch(), 100u);
  // It stepped down: the leader key is free again.
  auto client = ClientOf(etcd_.endpoints());
  EXPECT_EQ(client->Get(maru::LeaderElection::Prefix(pool_.uuid()) + "leader")->version, 0);
}

TEST(EpochFenceTest, RaiseOnlyUpAndOkUntilPassed) {
  LedPool pool;
  maru::PoolControl control = pool.control();
  ASSERT_TRUE(control.RaiseFence(3).ok());
  EXPECT_EQ(control.RaiseFence(2).errnum(), ESTALE);
  EXPECT_FALSE(control.Holds(2));
  ASSERT_TRUE(control.RaiseFence(5).ok());
  EXPECT_TRUE(control.Holds(5));
  EXPECT_TRUE(control.RaiseFence(5).ok());  // already ours
  ASSERT_TRUE(control.RaiseFence(6).ok());
  EXPECT_FALSE(control.Holds(5));
  EXPECT_EQ(pool.epoch(), 6u);
}

TEST(EtcdEndpointsTest, Parse) {
  auto e = maru::ParseEtcdEndpoints("http://a:1,b:2/,,c:3");
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0], "a:1");
  EXPECT_EQ(e[1], "b:2");
  EXPECT_EQ(e[2], "c:3");
  maru::EtcdOptions none;
  EXPECT_FALSE(maru::EtcdClient::Create(none).ok());
  none.endpoints = {"nocolon"};
  EXPECT_FALSE(maru::EtcdClient::Create(none).ok());
  EXPECT_EQ(maru::EtcdPrefixEnd("/a/"), "/a0");
}

}  // namespace

namespace {

// A client given a list of servers connects to the first that answers. A
// list that mixes the servers of two pools is a mistake: when its server
// dies, the client refuses to resume with a server of the other pool
// (ESTALE) rather than write into memory that pool does not own. Moving
// between the servers of one pool: tests/failover_test.cc.
TEST(ServerListTest, ClientNeverMovesToAnotherPoolsServer) {
  TestPool pool, other;  // two servers without etcd may not lead one pool
  Server a(other.path()), b(pool.path());
  ASSERT_TRUE(b.Start()) << b.log();
  // The first is not there yet: the client starts on the second.
  const std::string list = a.address() + "," + b.address();
  std::string out;
  ASSERT_EQ(RunClient(list, "store /first 65536", &out), 0) << out;
  ASSERT_EQ(RunClient(b.address(), "load /first 65536 " + pool.path(), &out), 0) << out;

  // Connected to the first, which then dies: the second serves another pool.
  ASSERT_TRUE(a.Start()) << a.log();
  TempDir dir;
  const std::string go = dir.path() + "/go";
  const std::string log = dir.path() + "/client.log";
  pid_t client =
      SpawnClient(list, "connect + wait-for " + go + " + store /second 65536 >" + log + " 2>&1");
  ASSERT_TRUE(WaitFor([&] {
    std::string said;
    maru_test::Run("cat " + log, &said);
    return said.find("connected") != std::string::npos;
  }));
  a.Kill9();
  ASSERT_EQ(maru_test::Run("touch " + go), 0);
  EXPECT_NE(Wait(client), 0);
  std::string said;
  maru_test::Run("cat " + log, &said);
  EXPECT_NE(said.find("serves another pool"), std::string::npos) << said;
  EXPECT_EQ(RunClient(b.address(), "open-errno /second 2", &out), 0) << out;  // ENOENT
}

}  // namespace

namespace {

// Not a check: how long the election takes to replace a killed leader,
// over MARU_HA_FAILOVERS kills (skipped when unset). Prints p50 and p99.
TEST(HaFigures, ElectionFailoverAfterKill) {
  const char *env = getenv("MARU_HA_FAILOVERS");
  if (!env) GTEST_SKIP() << "set MARU_HA_FAILOVERS=N to measure";
  const int rounds = atoi(env);
  EtcdCluster etcd(3);
  ASSERT_TRUE(etcd.Start());
  LedPool pool;
  std::vector<std::unique_ptr<Candidate>> all;
  int next_id = 0;
  auto add = [&] {
    all.push_back(
        std::make_unique<Candidate>(etcd.endpoints(), pool, "s" + std::to_string(next_id++)));
  };
  for (int i = 0; i < 3; ++i) add();
  std::vector<double> gaps;
  for (int r = 0; r < rounds; ++r) {
    ASSERT_TRUE(WaitFor([&] { return OnlyLeader(all) >= 0; }));
    for (auto &c : all) ASSERT_TRUE(WaitFor([&] { return c->Said("member"); }));
    const int leader = OnlyLeader(all);
    const auto start = std::chrono::steady_clock::now();
    all[leader]->Kill9();
    all.erase(all.begin() + leader);
    ASSERT_TRUE(WaitFor([&] { return OnlyLeader(all) >= 0; }));
    gaps.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    add();
  }
  std::sort(gaps.begin(), gaps.end());
  printf(
      "election failover after kill -9 (TTL 1 s), %d rounds: p50 %.0f ms, p99 %.0f ms, max %.0f "
      "ms\n",
      rounds, gaps[gaps.size() / 2], gaps[std::min(gaps.size() - 1, gaps.size() * 99 / 100)],
      gaps.back());
}

}  // namespace
