// Standby: a leader's MetaDb appending to the replication log in shared
// memory, and standbys tailing it into their own RocksDB: what they hold,
// where they resume, and what they refuse.
#include "ha/standby.h"

#include <gtest/gtest.h>

#include <memory>

#include "harness.h"
#include "meta/meta_db.h"
#include "shm_region.h"

namespace maru {
namespace {

using maru_test::ShmRegion;
using maru_test::TempDir;

std::unique_ptr<MetaDb> OpenDb(const std::string &dir) {
  Result<std::unique_ptr<MetaDb>> db = MetaDb::Open(dir, false);
  EXPECT_TRUE(db.ok()) << db.status().ToString();
  return db.ok() ? std::move(*db) : nullptr;
}

OpLog AttachLog(const ShmRegion &r) {
  Result<OpLog> log = OpLog::Attach(r.base(), r.bytes(), Coherence::kHw);
  EXPECT_TRUE(log.ok()) << log.status().ToString();
  return std::move(*log);
}

// Every record of `db`, in key order.
std::vector<std::pair<std::string, std::string>> Dump(MetaDb *db) {
  std::vector<std::pair<std::string, std::string>> out;
  Status s = db->Scan([&](std::string_view k, std::string_view v) {
    out.emplace_back(std::string(k), std::string(v));
    return true;
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

// A leader: its database, with the log attached as a writer.
struct Leader {
  Leader(const std::string &dir, OpLog log) : db(OpenDb(dir)), log(std::move(log)) {
    EXPECT_TRUE(db->AttachLog(&this->log, 1, [this] { return leading; }).ok());
  }
  // Creates, renames and deletes inodes, as chunks come and go.
  void Churn(uint64_t first, uint64_t n) {
    for (uint64_t i = first; i < first + n; ++i) {
      MetaDb::Batch b;
      schema::Inode inode;
      inode.set_ino(i);
      inode.set_parent(1);
      inode.set_name("chunk-" + std::to_string(i));
      inode.mutable_current()->set_size(i * 4096);
      b.PutInode(inode);
      if (i % 3 == 0) {  // a rename of an earlier one
        inode.set_ino(i / 2);
        inode.set_name("renamed-" + std::to_string(i));
        b.PutInode(inode);
      }
      if (i % 5 == 0) b.DeleteInode(i - 1);
      schema::Counters counters;
      counters.set_ino_limit(i + 1);
      b.PutCounters(counters);
      ASSERT_TRUE(db->Write(b).ok());
    }
  }
  std::unique_ptr<MetaDb> db;
  OpLog log;
  bool leading = true;
};

// A standby on its own database in `dir`, following the log in `region`.
struct Follower {
  Follower(const std::string &dir, const ShmRegion &region)
      : db(OpenDb(dir)), log(AttachLog(region)), standby(db.get(), &log) {
    EXPECT_TRUE(standby.Open().ok());
  }
  std::unique_ptr<MetaDb> db;
  OpLog log;
  Standby standby;
};

TEST(StandbyTest, AStandbyHoldsWhatTheLeaderWrote) {
  TempDir dir;
  ShmRegion region(4 << 20);
  Leader leader(dir.path() + "/leader", AttachLog(region));
  leader.Churn(10, 500);
  Follower f(dir.path() + "/standby", region);
  std::unique_ptr<MetaDb> &db = f.db;
  Standby &standby = f.standby;
  EXPECT_EQ(standby.lag().records, 500u);
  ASSERT_TRUE(standby.CatchUp().ok());
  EXPECT_EQ(Dump(db.get()), Dump(leader.db.get()));
  EXPECT_EQ(standby.lag().records, 0u);
  EXPECT_EQ(standby.lag().bytes, 0u);
  EXPECT_TRUE(standby.electable());
  // What it loads at a start is what the leader's start would load.
  Result<MetaDb::Contents> c = db->Load();
  ASSERT_TRUE(c.ok());
  EXPECT_GT(c->inodes.size(), 300u);
}

TEST(StandbyTest, ARestartedStandbyResumesAtTheNextRecord) {
  TempDir dir;
  ShmRegion region(4 << 20);
  Leader leader(dir.path() + "/leader", AttachLog(region));
  OpLog log = AttachLog(region);
  uint64_t seq_at_close = 0;
  {
    std::unique_ptr<MetaDb> db = OpenDb(dir.path() + "/standby");
    Standby standby(db.get(), &log);
    ASSERT_TRUE(standby.Open().ok());
    standby.Start();
    leader.Churn(10, 300);
    ASSERT_TRUE(maru_test::WaitFor([&] { return standby.applied().seq == 300; }));
    standby.Stop();
    seq_at_close = standby.applied().seq;
  }
  leader.Churn(310, 300);
  std::unique_ptr<MetaDb> db = OpenDb(dir.path() + "/standby");
  Standby standby(db.get(), &log);
  ASSERT_TRUE(standby.Open().ok());
  EXPECT_EQ(standby.applied().seq, seq_at_close);
  EXPECT_EQ(standby.lag().records, 300u);
  ASSERT_TRUE(standby.CatchUp().ok());
  EXPECT_EQ(standby.applied().seq, 600u);
  EXPECT_EQ(Dump(db.get()), Dump(leader.db.get()));
}

TEST(StandbyTest, AnOverrunStandbySaysSoAndBootstrapsFromASnapshot) {
  TempDir dir;
  ShmRegion region(OpLog::kMinBytes);
  Leader leader(dir.path() + "/leader", AttachLog(region));
  Follower f(dir.path() + "/standby", region);
  std::unique_ptr<MetaDb> &db = f.db;
  Standby &standby = f.standby;
  leader.Churn(10, 100);
  ASSERT_TRUE(standby.CatchUp().ok());
  leader.Churn(110, 2000);  // far more than the ring holds
  Status s = standby.CatchUp();
  EXPECT_EQ(s.errnum(), ESTALE) << s.ToString();
  EXPECT_TRUE(standby.lag().behind);
  EXPECT_EQ(standby.lag().error, "behind: needs a snapshot");
  EXPECT_FALSE(standby.electable());
  // A snapshot of the leader at its current seq, then tailing goes on.
  ASSERT_TRUE(standby.Bootstrap(Dump(leader.db.get())).ok());
  EXPECT_TRUE(standby.electable());
  leader.Churn(2110, 50);
  ASSERT_TRUE(standby.CatchUp().ok());
  EXPECT_EQ(standby.applied().seq, 2150u);
  EXPECT_EQ(Dump(db.get()), Dump(leader.db.get()));
}

TEST(StandbyTest, ACorruptedRecordIsNotApplied) {
  TempDir dir;
  ShmRegion region(4 << 20);
  Leader leader(dir.path() + "/leader", AttachLog(region));
  Follower f(dir.path() + "/standby", region);
  std::unique_ptr<MetaDb> &db = f.db;
  Standby &standby = f.standby;
  leader.Churn(10, 5);
  ASSERT_TRUE(standby.CatchUp().ok());
  const auto before = Dump(db.get());
  leader.Churn(15, 1);
  // The new record's bytes, flipped: the crc refuses it.
  const uint64_t at = standby.applied().pos;
  uint8_t *rec = region.base() + OpLog::kHeaderBytes + at;
  rec[30] ^= 0xff;
  Status s = standby.CatchUp();
  EXPECT_EQ(s.errnum(), EBADMSG) << s.ToString();
  EXPECT_EQ(Dump(db.get()), before);
  EXPECT_FALSE(standby.electable());
  EXPECT_EQ(standby.applied().seq, 6u - 1);
  rec[30] ^= 0xff;
}

// Someone who can write the pool appends a record with a valid crc whose
// bytes are not a metadata write (another column family, a key not ours,
// garbage): the standby refuses it.
TEST(StandbyTest, AForgedRecordWithAGoodCrcIsNotApplied) {
  const std::vector<std::string> forged = {
      std::string("garbage that is not a write batch"),
      std::string(12, '\0') + "\x01\x03key\x05value",  // a Put of a key not ours
  };
  for (const std::string &bytes : forged) {
    TempDir dir;
    ShmRegion region(4 << 20);
    OpLog forger = AttachLog(region);
    ASSERT_TRUE(forger.StartWriter({}, 1, nullptr).ok());
    ASSERT_TRUE(forger.Append(bytes).ok());
    std::unique_ptr<MetaDb> db = OpenDb(dir.path() + "/standby");
    OpLog log = AttachLog(region);
    Standby standby(db.get(), &log);
    ASSERT_TRUE(standby.Open().ok());
    EXPECT_EQ(standby.CatchUp().errnum(), EBADMSG);
    EXPECT_TRUE(Dump(db.get()).empty());
  }
}

TEST(StandbyTest, APromotedStandbyLeadsOnInTheSameLog) {
  TempDir dir;
  ShmRegion region(4 << 20);
  auto leader = std::make_unique<Leader>(dir.path() + "/leader", AttachLog(region));
  Follower f(dir.path() + "/standby", region);
  std::unique_ptr<MetaDb> &db = f.db;
  Standby &standby = f.standby;
  standby.Start();
  leader->Churn(10, 200);
  // The old leader stops leading (its fence says no): nothing more is written.
  leader->leading = false;
  MetaDb::Batch b;
  b.DeleteInode(10);
  EXPECT_EQ(leader->db->Write(b).errnum(), EPERM);
  ASSERT_TRUE(standby.Promote().ok());
  EXPECT_EQ(standby.applied().seq, 200u);
  EXPECT_EQ(Dump(db.get()), Dump(leader->db.get()));
  // The new leader continues the log: a standby of the old one follows on.
  const OpLogPosition at = standby.applied();
  Result<OpLogPosition> last = db->LogPosition();
  ASSERT_TRUE(last.ok());
  OpLog writer = AttachLog(region);
  ASSERT_TRUE(writer.StartWriter(*last, 2, nullptr).ok());
  EXPECT_EQ(writer.After(1).generation, at.generation);
  EXPECT_EQ(writer.After(1).seq, 201u);
}

// A database behind the log (its leader died between an append and its
// write; or a standby's, started as the leader): it takes the log's
// records it lacks before it appends, and the log goes on.
TEST(StandbyTest, ALeaderBehindTheLogCatchesUpBeforeItAppends) {
  TempDir dir;
  ShmRegion region(4 << 20);
  Leader leader(dir.path() + "/leader", AttachLog(region));
  std::unique_ptr<MetaDb> db = OpenDb(dir.path() + "/standby");
  OpLog log = AttachLog(region);
  {
    Standby standby(db.get(), &log);
    ASSERT_TRUE(standby.Open().ok());
    leader.Churn(10, 20);
    ASSERT_TRUE(standby.CatchUp().ok());
  }
  leader.Churn(30, 7);  // not applied
  const OpLogPosition head = log.Head();
  leader.leading = false;
  OpLog writer = AttachLog(region);
  ASSERT_TRUE(db->AttachLog(&writer, 2, nullptr).ok());
  EXPECT_EQ(Dump(db.get()), Dump(leader.db.get()));
  EXPECT_EQ(writer.After(1).generation, head.generation);
  EXPECT_EQ(writer.After(1).seq, head.seq + 1);
}

}  // namespace
}  // namespace maru
