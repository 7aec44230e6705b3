// Replication between real servers on a real pool: a leader appending to the
// pool's replication log and `maru-server --standby` processes tailing it
// into their own databases; a standby killed and restarted, one overrun,
// one promoted after the leader's kill -9 and read back through a client.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "ha/pool_log.h"
#include "ha/snapshot_client.h"
#include "harness.h"
#include "meta/meta_db.h"

namespace maru {
namespace {

using maru_test::Server;
using maru_test::TempDir;

// A pool formatted with a replication log region of `log_bytes`.
class LogPool {
 public:
  explicit LogPool(uint64_t log_bytes) {
    path_ = "/dev/shm/" + maru_test::UniqueName("maru-repl") + ".pool";
    std::string out;
    int rc = maru_test::Run(maru_test::MaructlBinary() + " mkpool " + path_ +
                                " --size 256M --unit 64K --mode 666 --log-size " +
                                std::to_string(log_bytes),
                            &out);
    EXPECT_EQ(rc, 0) << out;
  }
  ~LogPool() {
    unlink(path_.c_str());
    for (const char *suffix : {".index", ".index.new"}) unlink((path_ + suffix).c_str());
  }
  const std::string &path() const { return path_; }
  // The seq of the last record the log holds.
  uint64_t HeadSeq() const {
    Result<std::unique_ptr<PoolLog>> log = PoolLog::Open(path_);
    EXPECT_TRUE(log.ok() && *log);
    return log.ok() && *log ? (*log)->log().Head().seq : 0;
  }

 private:
  std::string path_;
};

// `maru-server --standby` on a database of its own, started and stopped by
// pid; once promoted (SIGUSR1) it serves on its socket.
class StandbyProcess {
 public:
  StandbyProcess(const std::string &pool, const std::string &db,
                 std::vector<std::string> extra = {})
      : extra_(std::move(extra)),
        pool_(pool),
        db_(db),
        socket_(dir_.path() + "/standby.sock"),
        log_(dir_.path() + "/log") {}
  ~StandbyProcess() { Stop(SIGKILL); }
  void Start() {
    std::vector<std::string> args = {maru_test::ServerBinary(),
                                     "--pool",
                                     pool_,
                                     "--db",
                                     db_,
                                     "--listen",
                                     "unix://" + socket_,
                                     "--standby",
                                     "--log-level",
                                     "warn",
                                     "--session-timeout-ms",
                                     "1500",
                                     "--heartbeat-ms",
                                     "300"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    pid_ = maru_test::Fork([&] {
      std::vector<char *> argv;
      for (const std::string &a : args) argv.push_back(const_cast<char *>(a.c_str()));
      argv.push_back(nullptr);
      const int log = open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      if (log >= 0) dup2(log, 1), dup2(log, 2);
      execv(argv[0], argv.data());
      return 127;
    });
  }
  void Stop(int sig = SIGTERM) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    maru_test::Wait(pid_);
    pid_ = -1;
  }
  void Promote() { kill(pid_, SIGUSR1); }
  // DB/STANDBY: "applied SEQ lag RECORDS BYTES STATE".
  std::string State() const {
    std::ifstream in(db_ + "/STANDBY");
    std::string line;
    std::getline(in, line);
    return line;
  }
  // It holds record `seq` (or a later one) and is fit to lead.
  bool Applied(uint64_t seq) const {
    unsigned long long applied = 0;
    char state[64] = "";
    return sscanf(State().c_str(), "applied %llu lag %*u %*u %63s", &applied, state) == 2 &&
           applied >= seq && std::string(state) == "electable";
  }
  std::string address() const { return "unix://" + socket_; }
  // What it wrote to stderr.
  std::string log() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  bool running() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }

 private:
  TempDir dir_;
  std::vector<std::string> extra_;
  std::string pool_, db_, socket_, log_;
  pid_t pid_ = -1;
};

// Stores /r/cI .. /r/c(J-1), each SIZE bytes of its path's pattern, sealed:
// one client process (tests/helpers/direct_client.cc).
int Store(const std::string &address, int from, int to, size_t size) {
  std::string script;
  for (int i = from; i < to; ++i)
    script += (script.empty() ? "" : " + ") + std::string("store /r/c") + std::to_string(i) + " " +
              std::to_string(size);
  return maru_test::RunClient(address, script);
}

// Every record of the database in `dir` (the server on it stopped).
std::vector<std::pair<std::string, std::string>> Dump(const std::string &dir) {
  std::vector<std::pair<std::string, std::string>> out;
  Result<std::unique_ptr<MetaDb>> db = MetaDb::Open(dir, false);
  EXPECT_TRUE(db.ok()) << db.status().ToString();
  if (!db.ok()) return out;
  EXPECT_TRUE((*db)
                  ->Scan([&](std::string_view k, std::string_view v) {
                    out.emplace_back(std::string(k), std::string(v));
                    return true;
                  })
                  .ok());
  return out;
}

// A leader on a pool with a log of `log_bytes`, and a standby following it.
class ReplicationTest : public ::testing::Test {
 protected:
  // `snapshots`: the standby takes a snapshot from the leader when behind.
  void Begin(uint64_t log_bytes, bool snapshots = false) {
    pool_ = std::make_unique<LogPool>(log_bytes);
    leader_ = std::make_unique<Server>(pool_->path());
    ASSERT_TRUE(leader_->Start());
    std::vector<std::string> extra;
    if (snapshots) extra = {"--snapshot-from", leader_->address()};
    standby_ = std::make_unique<StandbyProcess>(pool_->path(), dir_.path() + "/standby", extra);
    standby_->Start();
  }
  // Waits until the standby holds the log's last record.
  bool CaughtUp() {
    return maru_test::WaitFor([&] { return standby_->Applied(pool_->HeadSeq()); });
  }

  TempDir dir_;
  std::unique_ptr<LogPool> pool_;
  std::unique_ptr<Server> leader_;
  std::unique_ptr<StandbyProcess> standby_;
};

TEST_F(ReplicationTest, APromotedStandbyServesEverySealedChunkBitExact) {
  Begin(4 << 20);
  constexpr size_t kSize = 256 << 10;
  const std::string size = std::to_string(kSize);
  ASSERT_EQ(Store(leader_->address(), 0, 24, kSize), 0);
  std::string unlinks;
  for (int i = 0; i < 24; i += 4)
    unlinks += (unlinks.empty() ? "" : " + ") + std::string("unlink-errno /r/c") +
               std::to_string(i) + " 0";
  ASSERT_EQ(maru_test::RunClient(leader_->address(), unlinks), 0);
  // Created, never sealed (its writer dies): reclaimed by the new leader_->
  maru_test::RunClient(leader_->address(), "create-and-die /r/in-flight " + size);
  const uint64_t head = pool_->HeadSeq();
  ASSERT_TRUE(maru_test::WaitFor([&] { return standby_->Applied(head); })) << standby_->State();
  leader_->Kill9();
  standby_->Promote();
  ASSERT_TRUE(maru_test::WaitFor([&] {
    return maru_test::Run(maru_test::ClientCommand(standby_->address(), "count 0 /x")) == 0;
  })) << standby_->State();
  // Every sealed chunk reads back bit-exact; the unlinked ones and the one
  // in flight are gone.
  std::string reads;
  for (int i = 0; i < 24; ++i)
    reads +=
        (reads.empty() ? "" : " + ") + (i % 4 == 0 ? "open-errno /r/c" + std::to_string(i) + " 2"
                                                   : "fetch /r/c" + std::to_string(i) + " " + size);
  EXPECT_EQ(maru_test::RunClient(standby_->address(), reads), 0);
  // The chunk in flight is not readable (being written, as after a
  // restart), and is reclaimed once its writer's session is seen dead.
  EXPECT_EQ(maru_test::RunClient(standby_->address(), "open-errno /r/in-flight 16"), 0);
  EXPECT_TRUE(maru_test::WaitFor([&] {
    return maru_test::Run(
               maru_test::ClientCommand(standby_->address(), "open-errno /r/in-flight 2")) == 0;
  })) << standby_->log();
  // It leads: writes go on, into the same log.
  EXPECT_EQ(Store(standby_->address(), 100, 101, kSize), 0);
  EXPECT_GT(pool_->HeadSeq(), head);
}

TEST_F(ReplicationTest, AStandbyKilledAndRestartedResumesAtTheNextRecord) {
  Begin(4 << 20);
  ASSERT_EQ(Store(leader_->address(), 0, 10, 64 << 10), 0);
  ASSERT_TRUE(CaughtUp()) << standby_->State();
  // Killed while the leader writes on.
  const pid_t writer = maru_test::Fork([&] { return Store(leader_->address(), 10, 40, 64 << 10); });
  ASSERT_TRUE(maru_test::WaitFor([&] { return pool_->HeadSeq() > 40; }));
  standby_->Stop(SIGKILL);
  ASSERT_EQ(maru_test::Wait(writer), 0);
  standby_->Start();
  ASSERT_EQ(Store(leader_->address(), 40, 50, 64 << 10), 0);
  leader_->Stop();
  const uint64_t head = pool_->HeadSeq();
  ASSERT_TRUE(maru_test::WaitFor([&] { return standby_->Applied(head); })) << standby_->State();
  standby_->Stop();
  EXPECT_EQ(Dump(dir_.path() + "/standby"), Dump(leader_->db()));
}

TEST_F(ReplicationTest, AnOverrunStandbySaysItNeedsASnapshot) {
  Begin(128 << 10);
  ASSERT_EQ(Store(leader_->address(), 0, 1, 64 << 10), 0);
  ASSERT_TRUE(CaughtUp()) << standby_->State();
  standby_->Stop();
  ASSERT_EQ(Store(leader_->address(), 1, 400, 64 << 10), 0);  // laps the ring many times
  standby_->Start();
  ASSERT_TRUE(maru_test::WaitFor([&] {
    return standby_->State().find("behind: needs a snapshot") != std::string::npos;
  })) << standby_->State();
  EXPECT_TRUE(standby_->running());  // says so; does not crash
}

TEST_F(ReplicationTest, AnOverrunStandbyBootstrapsFromTheLeadersSnapshot) {
  Begin(128 << 10, true);
  ASSERT_EQ(Store(leader_->address(), 0, 1, 64 << 10), 0);
  ASSERT_TRUE(CaughtUp()) << standby_->State();
  standby_->Stop();
  ASSERT_EQ(Store(leader_->address(), 1, 300, 64 << 10), 0);  // laps the ring many times
  standby_->Start();
  ASSERT_TRUE(CaughtUp()) << standby_->State() << standby_->log();
  ASSERT_EQ(Store(leader_->address(), 300, 310, 64 << 10), 0);  // and tails on
  leader_->Stop();
  const uint64_t head = pool_->HeadSeq();
  ASSERT_TRUE(maru_test::WaitFor([&] { return standby_->Applied(head); })) << standby_->State();
  standby_->Stop();
  EXPECT_EQ(Dump(dir_.path() + "/standby"), Dump(leader_->db()));
}

// The whole metadata is for root: another uid asking is refused.
TEST_F(ReplicationTest, ASnapshotIsForRootOnly) {
  Begin(4 << 20);
  ASSERT_EQ(Store(leader_->address(), 0, 3, 64 << 10), 0);
  Result<std::vector<std::pair<std::string, std::string>>> root = FetchSnapshot(leader_->address());
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  EXPECT_GT(root->size(), 3u);
  const pid_t other = maru_test::Fork([&] {
    if (setgid(65534) != 0 || setuid(65534) != 0) return 2;
    Result<std::vector<std::pair<std::string, std::string>>> r = FetchSnapshot(leader_->address());
    fprintf(stderr, "as uid 65534: %s\n", r.ok() ? "served" : r.status().ToString().c_str());
    return !r.ok() && r.status().errnum() == EPERM ? 0 : 1;
  });
  EXPECT_EQ(maru_test::Wait(other), 0);
}

}  // namespace
}  // namespace maru
