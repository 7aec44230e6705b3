// Quotas (QuotaTable through MetaEngine): a directory tree's and a uid's
// space and pins, enforced at create, extend, alloc and pin; kept across a
// restart with usage recomputed from the inodes; set by root only. Space
// held under no name (an allocation not yet published, a reservation whose
// file was removed while written) counts for its writer's uid.
#include <gtest/gtest.h>

#include "engine_fixture.h"

namespace maru {
namespace {

constexpr uint64_t kUnit = 64u << 10;

class QuotaTest : public EngineFixture {
 protected:
  void SetUp() override { Reopen(); }

  void Reopen(int64_t session_timeout_ms = 15000) {
    EngineOptions options;
    options.session_timeout_ms = session_timeout_ms;
    options.grace_ms = 0;
    OpenEngine(options);
    if (!engine_) return;
    root_s_ = NewSession(root_);
    alice_s_ = NewSession(alice_);
  }

  int SetQuota(const std::string &path, uint64_t bytes, uint64_t pins = 0,
               const Caller *c = nullptr) {
    auto req = With<rpc::SetQuotaRequest>(c ? alice_s_ : root_s_);
    req.set_path(path);
    req.set_bytes(bytes);
    req.set_pins(pins);
    rpc::ErrorReply rep;
    engine_->SetQuota(c ? *c : root_, req, &rep);
    return rep.error();
  }

  int SetUidQuota(uint32_t uid, uint64_t bytes, uint64_t pins = 0) {
    auto req = With<rpc::SetQuotaRequest>(root_s_);
    req.set_by_uid(true);
    req.set_uid(uid);
    req.set_bytes(bytes);
    req.set_pins(pins);
    rpc::ErrorReply rep;
    engine_->SetQuota(root_, req, &rep);
    return rep.error();
  }

  // Creates and seals `size` bytes at `path`; the error of the first step that fails.
  int Store(const std::string &path, uint64_t size, const Caller &c, uint64_t s) {
    auto req = With<rpc::CreateRequest>(s);
    req.mutable_ref()->set_path(path);
    req.set_size(size);
    req.set_mode(0644);
    req.set_parents(true);
    rpc::ChunkReply created;
    engine_->Create(c, req, &created);
    if (created.error()) return created.error();
    auto seal = With<rpc::SealRequest>(s);
    seal.set_ino(created.attr().ino());
    seal.set_gen(created.attr().gen());
    seal.set_size(size);
    rpc::ChunkReply sealed;
    engine_->Seal(c, seal, &sealed);
    return sealed.error();
  }

  int Mkdir(const std::string &path, const Caller &c, uint64_t s) {
    auto req = With<rpc::MkdirRequest>(s);
    req.mutable_ref()->set_path(path);
    req.set_mode(0777);
    rpc::AttrReply rep;
    engine_->Mkdir(c, req, &rep);
    return rep.error();
  }

  int Pin(const std::string &path) {
    auto req = With<rpc::PinRequest>(root_s_);
    req.mutable_ref()->set_path(path);
    req.set_pin(true);
    rpc::AttrReply rep;
    engine_->Pin(root_, req, &rep);
    return rep.error();
  }

  int Unlink(const std::string &path) {
    auto req = With<rpc::RefRequest>(root_s_);
    req.mutable_ref()->set_path(path);
    rpc::ErrorReply rep;
    engine_->Unlink(root_, req, &rep);
    return rep.error();
  }

  // maru_alloc: the generation, or 0 with the error in *err.
  uint64_t Alloc(uint64_t size, int *err = nullptr) {
    auto req = With<rpc::AllocRequest>(alice_s_);
    req.set_size(size);
    rpc::ChunkReply rep;
    engine_->Alloc(alice_, req, &rep);
    if (err) *err = rep.error();
    return rep.error() ? 0 : rep.attr().gen();
  }

  int Publish(uint64_t gen, const std::string &path, uint64_t size) {
    auto req = With<rpc::PublishRequest>(alice_s_);
    req.set_gen(gen);
    req.set_path(path);
    req.set_mode(0644);
    req.set_size(size);
    rpc::ChunkReply rep;
    engine_->Publish(alice_, req, &rep);
    return rep.error();
  }

  int Abort(uint64_t ino, uint64_t gen) {
    auto req = With<rpc::HandleRequest>(alice_s_);
    req.set_ino(ino);
    req.set_gen(gen);
    rpc::ErrorReply rep;
    engine_->Abort(alice_, req, &rep);
    return rep.error();
  }

  rpc::QuotaInfo Quota(const std::string &target) {
    auto req = With<rpc::StatsRequest>(alice_s_);
    rpc::QuotasReply rep;
    engine_->ListQuotas(alice_, req, &rep);
    for (const auto &q : rep.quotas())
      if (q.target() == target) return q;
    ADD_FAILURE() << "no quota for " << target;
    return {};
  }

  uint64_t root_s_ = 0, alice_s_ = 0;
};

TEST_F(QuotaTest, DirectoryQuotaStopsItsTreeOnly) {
  ASSERT_EQ(0, Mkdir("/a", root_, root_s_));
  ASSERT_EQ(0, Mkdir("/b", root_, root_s_));
  ASSERT_EQ(0, SetQuota("/a", 4 * kUnit));
  EXPECT_EQ(0, Store("/a/one", 2 * kUnit, root_, root_s_));
  EXPECT_EQ(0, Store("/a/sub/two", 2 * kUnit, root_, root_s_));  // subdirectories count
  EXPECT_EQ(EDQUOT, Store("/a/three", 1, root_, root_s_));
  EXPECT_EQ(EDQUOT, Store("/a/sub/three", 1, root_, root_s_));
  EXPECT_EQ(0, Store("/b/big", 16 * kUnit, root_, root_s_));
  EXPECT_EQ(4 * kUnit, Quota("/a").used_bytes());
  // Space given back is space to use again.
  ASSERT_EQ(0, Unlink("/a/one"));
  EXPECT_EQ(2 * kUnit, Quota("/a").used_bytes());
  EXPECT_EQ(0, Store("/a/three", 2 * kUnit, root_, root_s_));
  // Moving a tree out takes its usage along.
  auto rename = With<rpc::RenameRequest>(root_s_);
  rename.mutable_from()->set_path("/a/sub");
  rename.mutable_to()->set_path("/b/sub");
  rpc::ErrorReply renamed;
  engine_->Rename(root_, rename, &renamed);
  ASSERT_EQ(0, renamed.error());
  EXPECT_EQ(2 * kUnit, Quota("/a").used_bytes());
  // Removed, the quota no longer applies.
  ASSERT_EQ(0, SetQuota("/a", 0));
  EXPECT_EQ(0, Store("/a/four", 8 * kUnit, root_, root_s_));
}

TEST_F(QuotaTest, RenamesCountWhatMovesWhereItLands) {
  ASSERT_EQ(0, Mkdir("/q", root_, root_s_));
  ASSERT_EQ(0, Mkdir("/q/in", root_, root_s_));
  ASSERT_EQ(0, Mkdir("/free", root_, root_s_));
  ASSERT_EQ(0, SetQuota("/q", 4 * kUnit));
  ASSERT_EQ(0, Store("/q/small", kUnit, root_, root_s_));
  ASSERT_EQ(0, Store("/q/in/two", 2 * kUnit, root_, root_s_));
  ASSERT_EQ(0, Store("/free/big", 8 * kUnit, root_, root_s_));
  ASSERT_EQ(0, Store("/free/one", kUnit, root_, root_s_));
  auto rename = [&](const std::string &from, const std::string &to, bool exchange) {
    auto req = With<rpc::RenameRequest>(root_s_);
    req.mutable_from()->set_path(from);
    req.mutable_to()->set_path(to);
    req.set_exchange(exchange);
    rpc::ErrorReply rep;
    engine_->Rename(root_, req, &rep);
    return rep.error();
  };
  EXPECT_EQ(EDQUOT, rename("/free/big", "/q/big", false));
  EXPECT_EQ(EDQUOT, rename("/free/big", "/q/small", false));  // replacing 1 of the 8 units
  EXPECT_EQ(EDQUOT, rename("/q/small", "/free/big", true));   // 8 in for 1 out
  EXPECT_EQ(0, rename("/q/small", "/free/one", true));        // 1 for 1
  EXPECT_EQ(0, rename("/q/in/two", "/q/two", false));         // within the tree: no change
  EXPECT_EQ(0, rename("/free/one", "/q/small", false));       // 1 replacing 1
  EXPECT_EQ(3 * kUnit, Quota("/q").used_bytes());
  EXPECT_EQ(0, rename("/free/big", "/free/big2", false));
}

TEST_F(QuotaTest, ExtendAndAllocAreChecked) {
  ASSERT_EQ(0, Mkdir("/a", root_, root_s_));
  ASSERT_EQ(0, SetQuota("/a", 2 * kUnit));
  auto req = With<rpc::CreateRequest>(root_s_);
  req.mutable_ref()->set_path("/a/f");
  req.set_size(kUnit);
  req.set_mode(0644);
  rpc::ChunkReply created;
  engine_->Create(root_, req, &created);
  ASSERT_EQ(0, created.error());
  auto extend = With<rpc::ExtendRequest>(root_s_);
  extend.set_ino(created.attr().ino());
  extend.set_gen(created.attr().gen());
  extend.set_size(3 * kUnit);
  rpc::ChunkReply extended;
  engine_->Extend(root_, extend, &extended);
  EXPECT_EQ(EDQUOT, extended.error());
  extend.set_size(2 * kUnit);
  engine_->Extend(root_, extend, &extended);
  EXPECT_EQ(0, extended.error());
  EXPECT_EQ(2 * kUnit, Quota("/a").used_bytes());  // reservations count

  ASSERT_EQ(0, SetUidQuota(alice_.uid, kUnit));
  auto alloc = With<rpc::AllocRequest>(alice_s_);
  alloc.set_size(2 * kUnit);
  rpc::ChunkReply allocated;
  engine_->Alloc(alice_, alloc, &allocated);
  EXPECT_EQ(EDQUOT, allocated.error());
}

TEST_F(QuotaTest, UidQuotaCountsWhatTheUidOwns) {
  ASSERT_EQ(0, Mkdir("/shared", root_, root_s_));
  ASSERT_EQ(0, SetUidQuota(alice_.uid, 2 * kUnit));
  EXPECT_EQ(0, Store("/shared/a1", 2 * kUnit, alice_, alice_s_));
  EXPECT_EQ(EDQUOT, Store("/shared/a2", 1, alice_, alice_s_));
  EXPECT_EQ(0, Store("/shared/r1", 8 * kUnit, root_, root_s_));  // root's own chunks are not hers
  EXPECT_EQ(2 * kUnit, Quota("uid:1000").used_bytes());
}

TEST_F(QuotaTest, PinQuota) {
  ASSERT_EQ(0, Mkdir("/a", root_, root_s_));
  ASSERT_EQ(0, SetQuota("/a", 0, 1));
  ASSERT_EQ(0, Store("/a/x", 1, root_, root_s_));
  ASSERT_EQ(0, Store("/a/y", 1, root_, root_s_));
  EXPECT_EQ(0, Pin("/a/x"));
  EXPECT_EQ(0, Pin("/a/x"));  // pinned already: takes nothing more
  EXPECT_EQ(EDQUOT, Pin("/a/y"));
  EXPECT_EQ(1u, Quota("/a").used_pins());
  ASSERT_EQ(0, Unlink("/a/x"));
  EXPECT_EQ(0, Pin("/a/y"));
}

TEST_F(QuotaTest, OnlyRootSetsQuotas) {
  ASSERT_EQ(0, Mkdir("/a", root_, root_s_));
  EXPECT_EQ(EPERM, SetQuota("/a", kUnit, 0, &alice_));
  EXPECT_EQ(ENOTDIR, (Store("/f", 1, root_, root_s_), SetQuota("/f", kUnit)));
}

TEST_F(QuotaTest, SurvivesRestartWithUsageRecomputed) {
  ASSERT_EQ(0, Mkdir("/a", root_, root_s_));
  ASSERT_EQ(0, SetQuota("/a", 4 * kUnit, 3));
  ASSERT_EQ(0, SetUidQuota(alice_.uid, 8 * kUnit));
  ASSERT_EQ(0, Store("/a/one", 3 * kUnit, root_, root_s_));
  ASSERT_EQ(0, Pin("/a/one"));
  Reopen();
  rpc::QuotaInfo a = Quota("/a");
  EXPECT_EQ(4 * kUnit, a.limit_bytes());
  EXPECT_EQ(3 * kUnit, a.used_bytes());
  EXPECT_EQ(3u, a.limit_pins());
  EXPECT_EQ(1u, a.used_pins());
  EXPECT_EQ(8 * kUnit, Quota("uid:1000").limit_bytes());
  EXPECT_EQ(EDQUOT, Store("/a/two", 2 * kUnit, root_, root_s_));
  // Shown in stats (df, marutop and /metrics read them there).
  rpc::StatsReply stats;
  engine_->Snapshot(&stats);
  EXPECT_EQ(2, stats.quotas_size());
}

TEST_F(QuotaTest, UnpublishedAllocationsCountForTheirUid) {
  ASSERT_EQ(0, SetUidQuota(alice_.uid, 3 * kUnit));
  int err = 0;
  const uint64_t a = Alloc(kUnit), b = Alloc(2 * kUnit);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(3 * kUnit, Quota("uid:1000").used_bytes());
  EXPECT_EQ(0u, Alloc(1, &err));  // checked against what she already holds
  EXPECT_EQ(EDQUOT, err);
  EXPECT_EQ(EDQUOT, Store("/f", 1, alice_, alice_s_));
  // Given back, it is space to use again.
  EXPECT_EQ(0, Abort(0, b));
  EXPECT_EQ(kUnit, Quota("uid:1000").used_bytes());
  // Published, it is charged once, as the file it became.
  EXPECT_EQ(0, Publish(a, "/named", 100));
  EXPECT_EQ(kUnit, Quota("uid:1000").used_bytes());
  EXPECT_EQ(0, Store("/f", 2 * kUnit, alice_, alice_s_));
  EXPECT_EQ(3 * kUnit, Quota("uid:1000").used_bytes());
}

TEST_F(QuotaTest, PublishingPastADirectoryQuotaIsRefusedAndKeepsTheAllocation) {
  ASSERT_EQ(0, Mkdir("/a", root_, root_s_));
  ASSERT_EQ(0, SetQuota("/a", 2 * kUnit));
  ASSERT_EQ(0, SetQuota("/", 4 * kUnit));  // "/" covers allocations too
  ASSERT_EQ(0, SetUidQuota(alice_.uid, 8 * kUnit));
  ASSERT_EQ(0, Store("/a/x", kUnit, alice_, alice_s_));
  const uint64_t gen = Alloc(2 * kUnit);
  ASSERT_NE(0u, gen);
  EXPECT_EQ(3 * kUnit, Quota("/").used_bytes());
  EXPECT_EQ(kUnit, Quota("/a").used_bytes());
  EXPECT_EQ(EDQUOT, Publish(gen, "/a/y", 2 * kUnit));
  // Still hers, still charged to her and to "/", not to /a.
  EXPECT_EQ(3 * kUnit, Quota("uid:1000").used_bytes());
  EXPECT_EQ(3 * kUnit, Quota("/").used_bytes());
  EXPECT_EQ(kUnit, Quota("/a").used_bytes());
  EXPECT_EQ(0, Publish(gen, "/b/y", 2 * kUnit));
  EXPECT_EQ(3 * kUnit, Quota("uid:1000").used_bytes());
  EXPECT_EQ(3 * kUnit, Quota("/").used_bytes());
  // A name taken leaves the allocation, and its charge, with her until she
  // lets it go (views of it may still be in use).
  const uint64_t lost = Alloc(kUnit);
  ASSERT_NE(0u, lost);
  EXPECT_EQ(EEXIST, Publish(lost, "/b/y", kUnit));
  EXPECT_EQ(4 * kUnit, Quota("uid:1000").used_bytes());
  EXPECT_EQ(0, Publish(lost, "/b/z", kUnit));
  EXPECT_EQ(4 * kUnit, Quota("uid:1000").used_bytes());
}

TEST_F(QuotaTest, AReservationWhoseFileWasRemovedCountsUntilItsWriterLetsGo) {
  ASSERT_EQ(0, SetUidQuota(alice_.uid, 2 * kUnit));
  auto req = With<rpc::CreateRequest>(alice_s_);
  req.mutable_ref()->set_path("/w");
  req.set_size(2 * kUnit);
  req.set_mode(0644);
  rpc::ChunkReply created;
  engine_->Create(alice_, req, &created);
  ASSERT_EQ(0, created.error());
  EXPECT_EQ(2 * kUnit, Quota("uid:1000").used_bytes());  // unsealed creates count
  ASSERT_EQ(0, Unlink("/w"));
  EXPECT_EQ(2 * kUnit, Quota("uid:1000").used_bytes());  // she still holds it
  EXPECT_EQ(EDQUOT, Store("/v", 1, alice_, alice_s_));
  EXPECT_EQ(0, Abort(created.attr().ino(), created.attr().gen()));
  EXPECT_EQ(0u, Quota("uid:1000").used_bytes());
  EXPECT_EQ(0, Store("/v", 1, alice_, alice_s_));
}

TEST_F(QuotaTest, HeldSpaceCountsForQuotasSetLaterAndAcrossARestart) {
  const uint64_t gen = Alloc(2 * kUnit);
  ASSERT_NE(0u, gen);
  ASSERT_EQ(0, SetUidQuota(alice_.uid, 3 * kUnit));
  EXPECT_EQ(2 * kUnit, Quota("uid:1000").used_bytes());
  Reopen(50);  // her session is orphaned: the allocation waits for her
  EXPECT_EQ(2 * kUnit, Quota("uid:1000").used_bytes());
  // She never comes back: when the orphan times out, the space goes back.
  EXPECT_TRUE(maru_test::WaitFor([&] {
    engine_->Tick();
    return Quota("uid:1000").used_bytes() == 0;
  }));
}

}  // namespace
}  // namespace maru
