// MetaEngine's eviction: each policy's choice when the pool is full, the
// watermarks, and the chunks an eviction may not take (pinned, read, held
// through a restart).
#include <gtest/gtest.h>

#include <string>

#include "engine_fixture.h"

namespace maru {
namespace {

class EvictionTest : public EngineTest {
 protected:
  void UsePolicy(const std::string &policy, double high = 1.0, double low = 1.0) {
    EngineOptions options;
    options.eviction = policy;
    options.high_watermark = high;
    options.low_watermark = low;
    Reopen(options);
  }
  bool Exists(const std::string &path) {
    auto req = With<rpc::RefRequest>(session_);
    req.mutable_ref()->set_path(path);
    rpc::AttrReply rep;
    engine_->GetAttr(root_, req, &rep);
    return rep.error() == 0;
  }
  int Store(const std::string &path, uint64_t size, const std::string &parent = "") {
    auto req = With<rpc::CreateRequest>(session_);
    req.mutable_ref()->set_path(path);
    req.set_size(size);
    req.set_parents(true);
    req.set_parent_chunk(parent);
    rpc::ChunkReply rep;
    engine_->Create(root_, req, &rep);
    if (rep.error()) return rep.error();
    return Seal(rep, root_, session_).error();
  }
  void Touch(const std::string &path) {
    rpc::ChunkReply r = Open(path, root_, session_);
    ASSERT_EQ(r.error(), 0);
    auto rel = With<rpc::ReleaseRequest>(session_);
    rel.add_leases(r.lease());
    rpc::ErrorReply rep;
    engine_->Release(root_, rel, &rep);
  }
  static constexpr uint64_t kChunk = 8 << 20;  // the pool holds 7 of them
};

TEST_F(EvictionTest, ARewriteMayNotNameTheChunkAsItsOwnParent) {
  ASSERT_EQ(Store("/self", 4096), 0);
  auto req = With<rpc::CreateRequest>(session_);
  req.mutable_ref()->set_path("/self");
  req.set_size(4096);
  req.set_truncate(true);
  req.set_parent_chunk("/self");
  rpc::ChunkReply rep;
  engine_->Create(root_, req, &rep);
  EXPECT_EQ(rep.error(), EINVAL);
  EXPECT_TRUE(Exists("/self"));  // nothing lost
  req.set_parent_chunk("");      // a rewrite as such is fine
  engine_->Create(root_, req, &rep);
  EXPECT_EQ(rep.error(), 0);
}

TEST_F(EvictionTest, LruEvictsTheLeastRecentlyUsedWhenFull) {
  UsePolicy("lru");
  for (int i = 0; i < 7; ++i) ASSERT_EQ(Store("/c" + std::to_string(i), kChunk), 0);
  Touch("/c0");
  ASSERT_EQ(Store("/new1", kChunk), 0);
  ASSERT_EQ(Store("/new2", kChunk), 0);
  EXPECT_TRUE(Exists("/c0"));
  EXPECT_FALSE(Exists("/c1"));
  EXPECT_FALSE(Exists("/c2"));
  EXPECT_TRUE(Exists("/c3"));
  EXPECT_TRUE(Fsck().empty());
}

TEST_F(EvictionTest, PinnedAndReadChunksStayUntilNothingElseIsLeft) {
  UsePolicy("lru");
  for (int i = 0; i < 7; ++i) ASSERT_EQ(Store("/c" + std::to_string(i), kChunk), 0);
  auto pin = With<rpc::PinRequest>(session_);
  pin.mutable_ref()->set_path("/c0");
  pin.set_pin(true);
  rpc::AttrReply pinned;
  engine_->Pin(root_, pin, &pinned);
  ASSERT_EQ(pinned.error(), 0);
  uint64_t reader = NewSession(root_);
  rpc::ChunkReply held = Open("/c1", root_, reader);
  ASSERT_EQ(held.error(), 0);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(Store("/n" + std::to_string(i), kChunk), 0);
  EXPECT_TRUE(Exists("/c0"));
  EXPECT_TRUE(Exists("/c1"));
  // A request that cannot fit even if everything evictable went fails, and
  // evicts nothing.
  EXPECT_EQ(Store("/big", 60 << 20), ENOSPC);
  EXPECT_TRUE(Exists("/c0"));
  EXPECT_TRUE(Exists("/c1"));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(Exists("/n" + std::to_string(i)));
  EXPECT_TRUE(Fsck().empty());
}

TEST_F(EvictionTest, FrequencyPolicyNeverTakesPinnedOrLeasedChunks) {
  UsePolicy("frequency");
  for (int i = 0; i < 7; ++i) ASSERT_EQ(Store("/c" + std::to_string(i), kChunk), 0);
  auto pin = With<rpc::PinRequest>(session_);
  pin.mutable_ref()->set_path("/c0");
  pin.set_pin(true);
  rpc::AttrReply pinned;
  engine_->Pin(root_, pin, &pinned);
  ASSERT_EQ(pinned.error(), 0);
  uint64_t reader = NewSession(root_);
  rpc::ChunkReply held = Open("/c1", root_, reader);
  ASSERT_EQ(held.error(), 0);
  // The pinned /c0 and the leased /c1 are the least recently used.
  for (int i = 2; i < 7; ++i) Touch("/c" + std::to_string(i));
  for (int i = 0; i < 5; ++i) ASSERT_EQ(Store("/n" + std::to_string(i), kChunk), 0);
  EXPECT_TRUE(Exists("/c0"));
  EXPECT_TRUE(Exists("/c1"));
  EXPECT_EQ(Store("/big", 60 << 20), ENOSPC);
  EXPECT_TRUE(Exists("/c0"));
  EXPECT_TRUE(Exists("/c1"));
  EXPECT_TRUE(Fsck().empty());
}

// A chunk an eviction passed because it was held is kept out of later
// evictions only while it is held: released or unpinned, it may go again,
// from its old place in the order.
TEST_F(EvictionTest, HeldChunksPassedByAnEvictionMayGoOnceReleased) {
  UsePolicy("lru");
  for (int i = 0; i < 7; ++i) ASSERT_EQ(Store("/c" + std::to_string(i), kChunk), 0);
  uint64_t reader = NewSession(root_);
  std::vector<uint64_t> leases;
  for (int i = 1; i < 7; ++i) {
    rpc::ChunkReply r = Open("/c" + std::to_string(i), root_, reader);
    ASSERT_EQ(r.error(), 0);
    leases.push_back(r.lease());
  }
  auto pin = With<rpc::PinRequest>(session_);
  pin.mutable_ref()->set_path("/c0");
  pin.set_pin(true);
  rpc::AttrReply pinned;
  engine_->Pin(root_, pin, &pinned);
  ASSERT_EQ(pinned.error(), 0);
  // Everything held: nothing may go, and every chunk was passed.
  EXPECT_EQ(Store("/n0", kChunk), ENOSPC);
  // One lease released: that chunk, and only it, may go.
  auto rel = With<rpc::ReleaseRequest>(reader);
  rel.add_leases(leases[2]);  // /c3
  rpc::ErrorReply released;
  engine_->Release(root_, rel, &released);
  ASSERT_EQ(released.error(), 0);
  ASSERT_EQ(Store("/n0", kChunk), 0);
  EXPECT_FALSE(Exists("/c3"));
  // Unpinned, the least recently used of all goes before /n0.
  pin.set_pin(false);
  engine_->Pin(root_, pin, &pinned);
  ASSERT_EQ(pinned.error(), 0);
  ASSERT_EQ(Store("/n1", kChunk), 0);
  EXPECT_FALSE(Exists("/c0"));
  EXPECT_TRUE(Exists("/n0"));
  for (int i : {1, 2, 4, 5, 6}) EXPECT_TRUE(Exists("/c" + std::to_string(i)));
  EXPECT_TRUE(Fsck().empty());
}

TEST_F(EvictionTest, PrefixPolicyTakesTailsFirstAndPrefixesTakeTheirTails) {
  UsePolicy("prefix");
  ASSERT_EQ(Store("/a", kChunk), 0);
  ASSERT_EQ(Store("/b", kChunk, "/a"), 0);
  ASSERT_EQ(Store("/c", kChunk, "/b"), 0);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(Store("/x" + std::to_string(i), kChunk), 0);
  // /a is the least recently used, but it is a prefix: the tail /c goes.
  ASSERT_EQ(Store("/y", kChunk), 0);
  EXPECT_TRUE(Exists("/a"));
  EXPECT_TRUE(Exists("/b"));
  EXPECT_FALSE(Exists("/c"));
  // Evicting a prefix takes what extends it along.
  auto ev = With<rpc::EvictRequest>(session_);
  ev.set_path("/a");
  rpc::EvictReply rep;
  engine_->Evict(root_, ev, &rep);
  ASSERT_EQ(rep.error(), 0);
  EXPECT_EQ(rep.chunks(), 2u);
  EXPECT_FALSE(Exists("/a"));
  EXPECT_FALSE(Exists("/b"));
  EXPECT_TRUE(Fsck().empty());
}

TEST_F(EvictionTest, SpaceHeldThroughARestartGraceIsNotMistakenForUse) {
  EngineOptions options;
  options.high_watermark = 0.7;
  options.low_watermark = 0.6;
  Reopen(options);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(Store("/c" + std::to_string(i), kChunk), 0);
  options.grace_ms = 300;
  Reopen(options);  // a restart: freed extents wait 300 ms for returning readers
  for (int i = 1; i < 5; ++i) ASSERT_EQ(Unlink("/c" + std::to_string(i), root_, session_), 0);
  ASSERT_EQ(Store("/n0", kChunk), 0);  // 75 % of the pool "used", most of it waiting
  ASSERT_TRUE(maru_test::WaitFor(
                  [&] {
                    Statfs();  // keeps the session alive
                    return false;
                  },
                  400) == false);
  ASSERT_EQ(Store("/n1", kChunk), 0);
  // What waited is free again; nothing live was evicted to make room.
  EXPECT_TRUE(Exists("/c0"));
  EXPECT_TRUE(Exists("/n0"));
  EXPECT_EQ(Statfs().deferred(), 0u);
  EXPECT_TRUE(Fsck().empty());
}

TEST_F(EvictionTest, HighWatermarkEvictsDownToTheLowOne) {
  UsePolicy("lru", 0.5, 0.3);
  for (int i = 0; i < 6; ++i) ASSERT_EQ(Store("/w" + std::to_string(i), kChunk), 0);
  rpc::StatfsReply st = Statfs();
  EXPECT_LE(static_cast<double>(st.total() - st.free()), 0.5 * static_cast<double>(st.total()));
  EXPECT_TRUE(Exists("/w5"));
  EXPECT_FALSE(Exists("/w0"));
}

}  // namespace
}  // namespace maru
