// MetaEngine without the RPC layer: namespace rules, permissions, leases,
// reservations, sessions, and what survives a reload from RocksDB.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <map>
#include <random>

#include "alloc/pool_device.h"
#include "engine_fixture.h"
#include "meta/metrics_server.h"
#include "proto/index_layout.h"

namespace maru {
namespace {

TEST_F(EngineTest, FirstWriterWinsAndUnsealedIsInvisible) {
  rpc::ChunkReply a = Create("/m/k", 1 << 20, root_, session_);
  ASSERT_EQ(a.error(), 0);
  uint64_t other = NewSession(root_);
  EXPECT_EQ(Create("/m/k", 1 << 20, root_, other).error(), EEXIST);
  EXPECT_EQ(Open("/m/k", root_, other).error(), EBUSY);
  ASSERT_EQ(Seal(a, root_, session_).error(), 0);
  rpc::ChunkReply r = Open("/m/k", root_, other);
  ASSERT_EQ(r.error(), 0);
  EXPECT_EQ(r.attr().size(), 1u << 20);
  EXPECT_EQ(r.extents(0).offset(), a.extents(0).offset());
  EXPECT_EQ(Create("/m/k", 1 << 20, root_, other).error(), EEXIST);
}

TEST_F(EngineTest, CreateIsIdempotentForItsRequestId) {
  auto req = With<rpc::CreateRequest>(session_);
  req.mutable_ref()->set_path("/x");
  req.set_size(4096);
  req.set_request_id(7);
  rpc::ChunkReply a, b;
  engine_->Create(root_, req, &a);
  engine_->Create(root_, req, &b);
  EXPECT_EQ(a.error(), 0);
  EXPECT_EQ(b.error(), 0);
  EXPECT_EQ(a.attr().gen(), b.attr().gen());
}

TEST_F(EngineTest, PermissionsFollowModeBits) {
  uint64_t as = NewSession(alice_), bs = NewSession(bob_);
  rpc::ChunkReply a = Create("/alice/private", 4096, alice_, as);
  ASSERT_EQ(a.error(), 0);
  ASSERT_EQ(Seal(a, alice_, as).error(), 0);
  // Bob can read (0644) but not remove from alice's 0755 directory.
  EXPECT_EQ(Open("/alice/private", bob_, bs).error(), 0);
  EXPECT_EQ(Unlink("/alice/private", bob_, bs), EACCES);
  EXPECT_EQ(Create("/alice/other", 4096, bob_, bs).error(), EACCES);
  auto chmod = With<rpc::SetAttrRequest>(as);
  chmod.mutable_ref()->set_path("/alice/private");
  chmod.set_set_mode(true);
  chmod.set_mode(0600);
  rpc::AttrReply rep;
  engine_->SetAttr(bob_, chmod, &rep);
  EXPECT_EQ(rep.error(), EPERM);  // not the owner
  engine_->SetAttr(alice_, chmod, &rep);
  EXPECT_EQ(rep.error(), 0);
  EXPECT_EQ(Open("/alice/private", bob_, bs).error(), EACCES);
  EXPECT_EQ(Open("/alice/private", root_, session_).error(), 0);
  // The root directory is sticky: bob cannot remove alice's top directory.
  auto rm = With<rpc::RefRequest>(bs);
  rm.mutable_ref()->set_path("/alice");
  rpc::ErrorReply err;
  engine_->Rmdir(bob_, rm, &err);
  EXPECT_EQ(err.error(), EPERM);
}

TEST_F(EngineTest, AnInodeNumberOpensNothingItsPathWouldNot) {
  // Alice's file is 0644 in a 0755 directory below her 0700 one: bob, who
  // learned (or cached) the inode numbers, still cannot search his way in.
  // Only maru-fuse (acting for its callers) and root may name inodes at all.
  Caller alice_via = alice_, bob_via = bob_;
  alice_via.via_trusted_daemon = bob_via.via_trusted_daemon = true;
  uint64_t as = NewSession(alice_), bs = NewSession(bob_);
  rpc::ChunkReply a = Create("/alice/sub/f", 4096, alice_, as);
  ASSERT_EQ(a.error(), 0);
  ASSERT_EQ(Seal(a, alice_, as).error(), 0);
  auto chmod = With<rpc::SetAttrRequest>(as);
  chmod.mutable_ref()->set_path("/alice");
  chmod.set_set_mode(true);
  chmod.set_mode(0700);
  rpc::AttrReply attr;
  engine_->SetAttr(alice_, chmod, &attr);
  ASSERT_EQ(attr.error(), 0);
  auto sub = With<rpc::RefRequest>(as);
  sub.mutable_ref()->set_path("/alice/sub");
  engine_->GetAttr(alice_, sub, &attr);
  ASSERT_EQ(attr.error(), 0);
  const uint64_t sub_ino = attr.attr().ino(), file_ino = a.attr().ino();

  auto by_ino = With<rpc::RefRequest>(bs);
  by_ino.mutable_ref()->set_ino(file_ino);
  rpc::ChunkReply opened;
  engine_->Open(bob_via, by_ino, &opened);
  EXPECT_EQ(opened.error(), EACCES);
  engine_->GetAttr(bob_via, by_ino, &attr);
  EXPECT_EQ(attr.error(), EACCES);
  auto in_sub = With<rpc::RefRequest>(bs);
  in_sub.mutable_ref()->set_ino(sub_ino);
  in_sub.mutable_ref()->set_name("f");
  engine_->GetAttr(bob_via, in_sub, &attr);
  EXPECT_EQ(attr.error(), EACCES);
  rpc::ErrorReply err;
  engine_->Unlink(bob_via, in_sub, &err);
  EXPECT_EQ(err.error(), EACCES);
  EXPECT_EQ(Open("/alice/sub/f", bob_, bs).error(), EACCES);
  // Alice and root still reach it by number.
  by_ino.mutable_header()->set_session(as);
  engine_->Open(alice_via, by_ino, &opened);
  EXPECT_EQ(opened.error(), 0);
  engine_->GetAttr(root_, by_ino, &attr);
  EXPECT_EQ(attr.error(), 0);
}

TEST_F(EngineTest, ARewriteByAnyoneButRootDropsSetIdBits) {
  uint64_t as = NewSession(alice_), bs = NewSession(bob_);
  rpc::ChunkReply a = Create("/shared/prog", 4096, alice_, as);
  ASSERT_EQ(Seal(a, alice_, as).error(), 0);
  auto chmod = With<rpc::SetAttrRequest>(as);
  chmod.mutable_ref()->set_path("/shared/prog");
  chmod.set_set_mode(true);
  chmod.set_mode(06777);
  rpc::AttrReply attr;
  engine_->SetAttr(alice_, chmod, &attr);
  ASSERT_EQ(attr.attr().mode() & 07777, 06777u);
  chmod.mutable_ref()->set_path("/shared");  // a rewrite by path writes the directory too
  chmod.set_mode(0777);
  engine_->SetAttr(alice_, chmod, &attr);
  ASSERT_EQ(attr.error(), 0);
  rpc::ChunkReply by_root = Create("/shared/prog", 4096, root_, session_, true);
  ASSERT_EQ(Seal(by_root, root_, session_).error(), 0);
  EXPECT_EQ(by_root.attr().mode() & 07777, 06777u);  // CAP_FSETID
  rpc::ChunkReply by_bob = Create("/shared/prog", 4096, bob_, bs, true);
  ASSERT_EQ(by_bob.error(), 0);
  EXPECT_EQ(by_bob.attr().mode() & 07777, 0777u);
  ASSERT_EQ(Seal(by_bob, bob_, bs).error(), 0);
}

TEST_F(EngineTest, RenameReplacesAtomicallyAndChecksShapes) {
  ASSERT_EQ(Seal(Create("/d/a", 4096, root_, session_), root_, session_).error(), 0);
  ASSERT_EQ(Seal(Create("/d/b", 8192, root_, session_), root_, session_).error(), 0);
  EXPECT_EQ(Rename("/d/a", "/d/b", root_, session_, true), EEXIST);
  EXPECT_EQ(Rename("/d/a", "/d/b", root_, session_), 0);
  EXPECT_EQ(Open("/d/a", root_, session_).error(), ENOENT);
  EXPECT_EQ(Open("/d/b", root_, session_).attr().size(), 4096u);
  ASSERT_EQ(Seal(Create("/e/f", 4096, root_, session_), root_, session_).error(), 0);
  EXPECT_EQ(Rename("/d", "/d/b/x", root_, session_), ENOTDIR);
  EXPECT_EQ(Rename("/d", "/e", root_, session_), ENOTEMPTY);
  EXPECT_EQ(Rename("/e/f", "/d", root_, session_), EISDIR);
  auto mk = With<rpc::MkdirRequest>(session_);
  mk.mutable_ref()->set_path("/d/sub");
  mk.set_mode(0755);
  rpc::AttrReply rep;
  engine_->Mkdir(root_, mk, &rep);
  ASSERT_EQ(rep.error(), 0);
  EXPECT_EQ(Rename("/d", "/d/sub/inner", root_, session_), EINVAL);
  EXPECT_TRUE(Fsck().empty());
}

TEST_F(EngineTest, UnlinkedChunkKeepsItsExtentsWhileLeased) {
  rpc::ChunkReply a = Create("/k", 32 << 20, root_, session_);
  ASSERT_EQ(Seal(a, root_, session_).error(), 0);
  uint64_t reader = NewSession(root_);
  rpc::ChunkReply r = Open("/k", root_, reader);
  ASSERT_EQ(r.error(), 0);
  uint64_t free_before = Statfs().free();
  ASSERT_EQ(Unlink("/k", root_, session_), 0);
  EXPECT_EQ(Statfs().free(), free_before);  // still leased
  EXPECT_EQ(Statfs().deferred(), 32u << 20);
  // New chunks never land on the leased extents.
  for (int i = 0; i < 3; ++i) {
    rpc::ChunkReply n = Create("/fill" + std::to_string(i), 8 << 20, root_, session_);
    ASSERT_EQ(n.error(), 0);
    for (const auto &e : n.extents()) {
      bool overlaps = e.offset() < r.extents(0).offset() + r.extents(0).length() &&
                      r.extents(0).offset() < e.offset() + e.length();
      EXPECT_FALSE(overlaps);
    }
  }
  auto rel = With<rpc::ReleaseRequest>(reader);
  rel.add_leases(r.lease());
  rpc::ErrorReply rep;
  engine_->Release(root_, rel, &rep);
  EXPECT_EQ(Statfs().deferred(), 0u);
  EXPECT_TRUE(Fsck().empty());
}

TEST_F(EngineTest, ReleasesRideOnTheNextRequest) {
  rpc::ChunkReply a = Create("/ride", 8 << 20, root_, session_);
  ASSERT_EQ(Seal(a, root_, session_).error(), 0);
  rpc::ChunkReply r = Open("/ride", root_, session_);
  ASSERT_EQ(r.error(), 0);
  ASSERT_EQ(Unlink("/ride", root_, session_), 0);
  EXPECT_EQ(Statfs().deferred(), 8u << 20);
  auto req = With<rpc::StatfsRequest>(session_);
  req.mutable_header()->add_release(r.lease());
  req.mutable_header()->add_release(424242);  // unknown: ignored
  rpc::StatfsReply rep;
  engine_->Statfs(root_, req, &rep);
  EXPECT_EQ(rep.error(), 0);
  EXPECT_EQ(rep.deferred(), 0u);  // released before the request was served
}

TEST_F(EngineTest, ExpiredSessionAbortsReservationsAndDropsLeases) {
  uint64_t writer = NewSession(root_);
  ASSERT_EQ(Create("/w", 1 << 20, root_, writer).error(), 0);
  // The writer also reads a chunk that is then unlinked: its lease defers
  // the space until the lease goes.
  ASSERT_EQ(Seal(Create("/read", 2 << 20, root_, session_), root_, session_).error(), 0);
  ASSERT_EQ(Open("/read", root_, writer).error(), 0);
  ASSERT_EQ(Unlink("/read", root_, session_), 0);
  ASSERT_EQ(Statfs().deferred(), 2u << 20);
  uint64_t free_during = Statfs().free();
  // Keep our own session alive while the writer falls silent.
  ASSERT_TRUE(maru_test::WaitFor(
      [&] {
        Statfs();
        engine_->Tick();
        return Create("/w", 1 << 20, root_, session_).error() == 0;
      },
      5000));
  EXPECT_EQ(Statfs().free(), free_during + (2u << 20));  // the old reservation went back
  EXPECT_EQ(Statfs().deferred(), 0u);                    // and the lease with it
  EXPECT_TRUE(Fsck().empty());
}

TEST_F(EngineTest, ReloadRestoresSealedChunksAndUnfinishedWrites) {
  rpc::ChunkReply a = Create("/keep/a", 3 << 20, root_, session_);
  ASSERT_EQ(Seal(a, root_, session_).error(), 0);
  rpc::ChunkReply w = Create("/keep/writing", 1 << 20, root_, session_);
  ASSERT_EQ(w.error(), 0);
  uint64_t writer = session_;
  uint64_t free_before = Statfs().free();
  Reopen();
  rpc::ChunkReply r = Open("/keep/a", root_, session_);
  ASSERT_EQ(r.error(), 0);
  EXPECT_EQ(r.extents(0).offset(), a.extents(0).offset());
  EXPECT_EQ(Open("/keep/writing", root_, session_).error(), EBUSY);
  EXPECT_EQ(Statfs().free(), free_before);
  // The writer comes back under its old session id and finishes.
  rpc::OpenSessionRequest resume;
  resume.set_resume(writer);
  rpc::OpenSessionReply rep;
  engine_->OpenSession(root_, resume, &rep);
  EXPECT_TRUE(rep.resumed());
  EXPECT_EQ(Seal(w, root_, writer).error(), 0);
  EXPECT_EQ(Open("/keep/writing", root_, session_).error(), 0);
  EXPECT_TRUE(Fsck().empty());
}

TEST_F(EngineTest, PoolEpochChangeDropsChunksLoudly) {
  ASSERT_EQ(Seal(Create("/gone/a", 1 << 20, root_, session_), root_, session_).error(), 0);
  engine_.reset();
  FormatOptions options;
  options.size = 64ull << 20;
  options.force = true;
  ASSERT_TRUE(FormatPool(pool_.path(), options).ok());
  testing::internal::CaptureStderr();
  Reopen();
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("dropped the metadata of its 1 chunks"), std::string::npos) << said;
  EXPECT_EQ(Open("/gone/a", root_, session_).error(), ENOENT);
  auto st = With<rpc::RefRequest>(session_);
  st.mutable_ref()->set_path("/gone");
  rpc::AttrReply rep;
  engine_->GetAttr(root_, st, &rep);
  EXPECT_EQ(rep.error(), 0);  // directories are kept
  EXPECT_EQ(Statfs().free(), Statfs().total());
}

TEST_F(EngineTest, UnlinkedUnfinishedWriteKeepsItsSpaceThroughAReload) {
  // The writer may still be storing into its extents: they must not be
  // handed out again until it is gone, even across a restart.
  uint64_t writer = NewSession(alice_);
  ASSERT_EQ(Create("/tmpw", 4 << 20, alice_, writer).error(), 0);
  ASSERT_EQ(Unlink("/tmpw", root_, session_), 0);
  const uint64_t free_during = Statfs().free();
  Reopen();
  EXPECT_EQ(Statfs().free(), free_during);
  // Once the orphaned writer times out, the space comes back.
  ASSERT_TRUE(maru_test::WaitFor(
      [&] {
        engine_->Tick();
        return Statfs().free() == Statfs().total();
      },
      5000));
  EXPECT_TRUE(Fsck().empty());
}

TEST_F(EngineTest, ASessionIsResumedOnlyByItsOwner) {
  uint64_t writer = NewSession(alice_);
  ASSERT_EQ(Create("/alices", 1 << 20, alice_, writer).error(), 0);
  Reopen();  // the writer's session is now orphaned, waiting for alice
  rpc::OpenSessionRequest resume;
  resume.set_resume(writer);
  rpc::OpenSessionReply rep;
  engine_->OpenSession(bob_, resume, &rep);
  EXPECT_FALSE(rep.resumed());
  EXPECT_NE(rep.session(), writer);
  engine_->OpenSession(alice_, resume, &rep);
  EXPECT_TRUE(rep.resumed());
  EXPECT_EQ(rep.session(), writer);
  // Now live, it is alice's client's: not even alice may take it again.
  rpc::OpenSessionReply again;
  engine_->OpenSession(alice_, resume, &again);
  EXPECT_FALSE(again.resumed());
  EXPECT_NE(again.session(), writer);
}

TEST_F(EngineTest, LeaseIdsFromBeforeAReloadNameNoNewLease) {
  ASSERT_EQ(Seal(Create("/l", 1 << 20, root_, session_), root_, session_).error(), 0);
  const uint64_t before = Open("/l", root_, session_).lease();
  Reopen();
  EXPECT_NE(Open("/l", root_, session_).lease(), before);
}

TEST_F(EngineTest, DevicesWithDifferentUnitsAreRefused) {
  maru_test::TestPool other(64ull << 20);
  FormatOptions options;
  options.size = 64ull << 20;
  options.unit = 2ull << 20;
  options.force = true;
  ASSERT_TRUE(FormatPool(other.path(), options).ok());
  engine_.reset();
  EngineOptions eo;
  eo.pool_paths = {pool_.path(), other.path()};
  eo.db_dir = dir_.path() + "/db";
  Result<std::unique_ptr<MetaEngine>> e = MetaEngine::Open(eo);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().errnum(), EINVAL);
}

TEST_F(EngineTest, UnknownSessionIsRefused) {
  auto req = With<rpc::RefRequest>(12345);
  req.mutable_ref()->set_path("/");
  rpc::AttrReply rep;
  engine_->GetAttr(root_, req, &rep);
  EXPECT_EQ(rep.error(), ENOTCONN);
}

// Random requests, valid and not, from several sessions: the engine never
// crashes, and its extent maps stay consistent with its free space.
TEST_F(EngineTest, SurvivesRandomRequests) {
  // MARU_FUZZ_SEED explores other sequences; the default one is fixed.
  const char *seed = getenv("MARU_FUZZ_SEED");
  std::mt19937_64 rng(seed ? strtoull(seed, nullptr, 10) : 1234);
  std::vector<uint64_t> sessions = {session_, NewSession(root_), NewSession(alice_)};
  std::vector<Caller> callers = {root_, root_, alice_};
  std::vector<rpc::ChunkReply> handles;  // reservations and leases seen
  std::vector<std::string> names = {
      "/a", "/a/b", "/d/e", "/", "//a//b", "/a/../x", "relative", "", "/" + std::string(300, 'n')};
  for (int i = 0; i < 12; ++i) {
    names.push_back("/k" + std::to_string(i));
    names.push_back("/dir/k" + std::to_string(i));
  }
  auto name = [&] { return names[rng() % names.size()]; };
  auto pick = [&](auto &v) -> decltype(v[0]) & { return v[rng() % v.size()]; };
  for (int step = 0; step < 50000; ++step) {
    const size_t who = rng() % sessions.size();
    const Caller &c = callers[who];
    const uint64_t s = sessions[who];
    const uint64_t sizes[] = {0, 1, 4096, 65536, 1 << 20, 9 << 20, 1ull << 40, ~0ull};
    switch (rng() % 12) {
      case 0: {
        rpc::ChunkReply r = Create(name(), sizes[rng() % 8], c, s, rng() % 2);
        if (r.error() == 0) handles.push_back(r);
        break;
      }
      case 1:
        if (!handles.empty()) {
          rpc::ChunkReply h = pick(handles);
          h.mutable_attr()->set_size(rng() % 2 ? h.attr().size() : sizes[rng() % 8]);
          Seal(h, c, s, rng() % 2);
        }
        break;
      case 2:
        if (!handles.empty()) {
          auto req = With<rpc::ExtendRequest>(s);
          req.set_ino(pick(handles).attr().ino());
          req.set_gen(pick(handles).attr().gen());
          req.set_size(sizes[rng() % 8]);
          rpc::ChunkReply rep;
          engine_->Extend(c, req, &rep);
        }
        break;
      case 3:
        if (!handles.empty()) {
          auto req = With<rpc::HandleRequest>(s);
          req.set_ino(pick(handles).attr().ino());
          req.set_gen(rng() % 2 ? pick(handles).attr().gen() : rng());
          rpc::ErrorReply rep;
          engine_->Abort(c, req, &rep);
        }
        break;
      case 4: {
        rpc::ChunkReply r = Open(name(), c, s);
        if (r.error() == 0) handles.push_back(r);
        break;
      }
      case 5: {
        auto req = With<rpc::ReleaseRequest>(s);
        for (int i = 0; i < 3 && !handles.empty(); ++i)
          req.add_leases(rng() % 3 ? pick(handles).lease() : rng());
        rpc::ErrorReply rep;
        engine_->Release(c, req, &rep);
        break;
      }
      case 6:
        Unlink(name(), c, s);
        break;
      case 7:
        Rename(name(), name(), c, s, rng() % 2);
        break;
      case 8: {
        auto req = With<rpc::MkdirRequest>(s);
        req.mutable_ref()->set_path(name());
        req.set_mode(static_cast<uint32_t>(rng()));
        req.set_parents(rng() % 2);
        rpc::AttrReply rep;
        engine_->Mkdir(c, req, &rep);
        auto rm = With<rpc::RefRequest>(s);
        rm.mutable_ref()->set_path(name());
        rpc::ErrorReply err;
        if (rng() % 2) engine_->Rmdir(c, rm, &err);
        break;
      }
      case 9: {
        auto req = With<rpc::SetAttrRequest>(s);
        req.mutable_ref()->set_ino(rng() % 40);
        req.set_set_mode(true);
        req.set_mode(static_cast<uint32_t>(rng()));
        req.set_set_parent(rng() % 2);
        req.set_parent_path(name());
        rpc::AttrReply rep;
        engine_->SetAttr(c, req, &rep);
        auto pin = With<rpc::PinRequest>(s);
        pin.mutable_ref()->set_path(name());
        pin.set_pin(rng() % 2);
        pin.set_ttl_ms(rng() % 3);
        engine_->Pin(c, pin, &rep);
        break;
      }
      case 10: {
        auto req = With<rpc::LookupPrefixRequest>(s);
        for (int i = 0; i < 4; ++i) req.add_paths(name());
        rpc::LookupPrefixReply rep;
        engine_->LookupPrefix(c, req, &rep);
        for (const auto &h : rep.hits()) handles.push_back(h);
        auto rd = With<rpc::ReaddirRequest>(s);
        rd.mutable_ref()->set_ino(rng() % 40);
        rd.set_max(static_cast<uint32_t>(rng() % 3));
        rd.set_after(name());
        rpc::ReaddirReply dir;
        engine_->Readdir(c, rd, &dir);
        break;
      }
      case 11: {
        auto ev = With<rpc::EvictRequest>(s);
        ev.set_path(rng() % 2 ? name() : "");
        ev.set_bytes(sizes[rng() % 8] % (16 << 20));
        rpc::EvictReply rep;
        engine_->Evict(c, ev, &rep);
        engine_->Tick();
        break;
      }
    }
    if (handles.size() > 64) handles.erase(handles.begin(), handles.begin() + 32);
  }
  // The sequence did real work, not only refusals.
  auto st = With<rpc::StatsRequest>(session_);
  rpc::StatsReply stats;
  engine_->Stats(root_, st, &stats);
  EXPECT_GT(stats.bytes_stored(), 0u);
  EXPECT_GT(stats.chunks() + stats.evictions(), 10u);
  EXPECT_TRUE(Fsck().empty());
  // And all of it comes back from RocksDB the same.
  Reopen();
  EXPECT_TRUE(Fsck().empty());
}

// --- Batched and lease-free operations ------------------------------------

TEST_F(EngineTest, OversizedBatchesAreRefusedBeforeAnyWork) {
  auto creates = With<rpc::CreateBatchRequest>(session_);
  for (int i = 0; i <= MetaEngine::kBatchMax; ++i) {
    rpc::CreateRequest *one = creates.add_creates();
    one->mutable_ref()->set_path("/big/c" + std::to_string(i));
    one->set_size(4096);
    one->set_parents(true);
  }
  rpc::ChunkBatchReply created;
  engine_->CreateBatch(root_, creates, &created);
  EXPECT_EQ(created.error(), E2BIG);
  EXPECT_EQ(created.chunks_size(), 0);
  EXPECT_EQ(Open("/big/c0", root_, session_).error(), ENOENT);  // nothing was made
  auto seals = With<rpc::SealBatchRequest>(session_);
  for (int i = 0; i <= MetaEngine::kBatchMax; ++i) seals.add_seals();
  rpc::ChunkBatchReply sealed;
  engine_->SealBatch(root_, seals, &sealed);
  EXPECT_EQ(sealed.error(), E2BIG);
  auto paths = With<rpc::PathsRequest>(session_);
  auto pins = With<rpc::PinBatchRequest>(session_);
  auto lookups = With<rpc::LookupPrefixRequest>(session_);
  for (int i = 0; i <= MetaEngine::kBatchMax; ++i) {
    paths.add_paths("/x");
    pins.add_paths("/x");
    lookups.add_paths("/x");
  }
  rpc::ErrorsReply unlinked, pinned;
  engine_->UnlinkBatch(root_, paths, &unlinked);
  engine_->PinBatch(root_, pins, &pinned);
  rpc::CountPrefixReply counted;
  engine_->CountPrefix(root_, lookups, &counted);
  EXPECT_EQ(unlinked.error(), E2BIG);
  EXPECT_EQ(pinned.error(), E2BIG);
  EXPECT_EQ(counted.error(), E2BIG);
}

TEST_F(EngineTest, AllocationIsHeldThroughAReloadUntilItsWriterIsGone) {
  uint64_t writer = NewSession(alice_);
  auto req = With<rpc::AllocRequest>(writer);
  req.set_size(4 << 20);
  rpc::ChunkReply got;
  engine_->Alloc(alice_, req, &got);
  ASSERT_EQ(got.error(), 0);
  const uint64_t free_during = Statfs().free();
  EXPECT_LE(free_during + (4 << 20), Statfs().total());
  Reopen();
  EXPECT_EQ(Statfs().free(), free_during);
  EXPECT_TRUE(Fsck().empty());
  ASSERT_TRUE(maru_test::WaitFor(
      [&] {
        engine_->Tick();
        return Statfs().free() == Statfs().total();
      },
      5000));
}

TEST_F(EngineTest, AllocationIsPublishedAfterARestartByItsResumedSession) {
  uint64_t writer = NewSession(alice_);
  auto alloc = With<rpc::AllocRequest>(writer);
  alloc.set_size(1 << 20);
  rpc::ChunkReply got;
  engine_->Alloc(alice_, alloc, &got);
  ASSERT_EQ(got.error(), 0);
  Reopen();
  rpc::OpenSessionRequest resume;
  resume.set_resume(writer);
  rpc::OpenSessionReply resumed;
  engine_->OpenSession(alice_, resume, &resumed);
  ASSERT_TRUE(resumed.resumed());
  auto publish = With<rpc::PublishRequest>(writer);
  publish.set_gen(got.attr().gen());
  publish.set_path("/after-restart");
  publish.set_size(1 << 20);
  rpc::ChunkReply published;
  engine_->Publish(alice_, publish, &published);
  ASSERT_EQ(published.error(), 0);
  // The chunk holds the allocated extents, and survives the next reload.
  ASSERT_EQ(published.extents_size(), got.extents_size());
  EXPECT_EQ(published.extents(0).offset(), got.extents(0).offset());
  Reopen();
  EXPECT_EQ(Open("/after-restart", root_, session_).error(), 0);
  EXPECT_TRUE(Fsck().empty());
}

TEST_F(EngineTest, PublishLinksAndSealsOnlyTheSessionsOwnAllocation) {
  auto alloc = With<rpc::AllocRequest>(session_);
  alloc.set_size(1 << 20);
  rpc::ChunkReply got;
  engine_->Alloc(root_, alloc, &got);
  ASSERT_EQ(got.error(), 0);
  // Another session cannot publish it.
  uint64_t other = NewSession(root_);
  auto publish = With<rpc::PublishRequest>(other);
  publish.set_gen(got.attr().gen());
  publish.set_path("/pub/a");
  publish.set_size(1 << 20);
  rpc::ChunkReply published;
  engine_->Publish(root_, publish, &published);
  EXPECT_EQ(published.error(), ESTALE);
  publish.mutable_header()->set_session(session_);
  engine_->Publish(root_, publish, &published);
  ASSERT_EQ(published.error(), 0);
  EXPECT_NE(published.lease(), 0u);
  EXPECT_EQ(Open("/pub/a", root_, session_).error(), 0);
  engine_->Publish(root_, publish, &published);  // twice
  EXPECT_EQ(published.error(), ESTALE);
  EXPECT_TRUE(Fsck().empty());
}

TEST_F(EngineTest, InstanceNamesLabelSessionsWithBoundedCardinality) {
  auto open = [&](const std::string &instance) {
    rpc::OpenSessionRequest req;
    req.set_instance(instance);
    rpc::OpenSessionReply rep;
    engine_->OpenSession(root_, req, &rep);
    return rep.error();
  };
  EXPECT_EQ(open(std::string(65, 'x')), ENAMETOOLONG);
  EXPECT_EQ(open("two\nlines"), EINVAL);
  ASSERT_EQ(open("vllm-0"), 0);
  ASSERT_EQ(open("vllm-0"), 0);
  ASSERT_EQ(open("say \"hi\" \\"), 0);
  ASSERT_EQ(open("say \"hi\" \\"), 0);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(open("many-" + std::to_string(i)), 0);
  rpc::StatsReply st;
  engine_->Snapshot(&st);
  const std::string text = RenderPrometheus(st);
  EXPECT_NE(text.find("maru_sessions{client_instance=\"vllm-0\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("maru_sessions{client_instance=\"\"} 1\n"), std::string::npos);  // ours
  EXPECT_NE(text.find("maru_sessions{client_instance=\"(other)\"}"), std::string::npos);
  size_t series = 0;
  for (size_t at = text.find("\nmaru_sessions{"); at != std::string::npos;
       at = text.find("\nmaru_sessions{", at + 1))
    ++series;
  EXPECT_LE(series, 33u);
  uint64_t total = 0;
  for (const auto &[name, n] : st.sessions_by_instance()) total += n;
  EXPECT_EQ(total, st.sessions());
  // Names the tools show, escaped in the label.
  EXPECT_NE(text.find("client_instance=\"say \\\"hi\\\" \\\\\""), std::string::npos);
}

// The index's entries for `inos`: how many each has, and how many are under
// `path` (for the inode that path should name).
struct IndexEntries {
  std::map<uint64_t, int> of;  // ino -> entries
  int under_path = 0, under_path_for_others = 0;
};
IndexEntries ReadIndexEntries(const std::string &index_path, const std::string &path,
                              uint64_t ino) {
  IndexEntries out;
  int fd = open(index_path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << index_path;
  if (fd < 0) return out;
  struct stat st;
  fstat(fd, &st);
  void *base = mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  EXPECT_NE(base, MAP_FAILED);
  if (base == MAP_FAILED) return out;
  const auto &header = *static_cast<const index::Header *>(base);
  uint64_t key[2];
  index::PathKey(header.key, path, key);
  const index::Entry *entries = index::Entries(base, header);
  for (uint64_t i = 0; i < header.entries; ++i) {
    index::EntryData e{};
    uint64_t seq;
    EXPECT_TRUE(index::ReadEntry(entries[i], &e, &seq));
    if (!(e.flags & index::kUsed)) continue;
    ++out.of[e.ino];
    if (e.key[0] == key[0] && e.key[1] == key[1])
      ++(e.ino == ino ? out.under_path : out.under_path_for_others);
  }
  munmap(base, st.st_size);
  return out;
}

// Inodes whose directory is gone, or whose name another took, go to
// /lost+found at a start. The index, made beside the linking from each
// inode's name and parent as recorded, is made anew then: an orphan's entry
// is under its new path, and the path it lost names the inode that kept it.
TEST_F(EngineTest, OrphansGoToLostFoundAndTheIndexHasThemThere) {
  const std::string index_path = pool_.path() + ".index";
  rpc::ChunkReply gone = Create("/gone/f", 4096, root_, session_);
  ASSERT_EQ(Seal(gone, root_, session_).error(), 0);
  rpc::ChunkReply kept = Create("/kept/g", 4096, root_, session_);
  ASSERT_EQ(Seal(kept, root_, session_).error(), 0);
  rpc::ChunkReply clash = Create("/other/g", 4096, root_, session_);
  ASSERT_EQ(Seal(clash, root_, session_).error(), 0);

  // A directory record lost: its file goes to a /lost+found made for it.
  EditDatabase([](const MetaDb::Contents &contents, MetaDb::Batch *batch) {
    for (const schema::Inode &r : contents.inodes)
      if (r.name() == "gone") batch->DeleteInode(r.ino());
  });
  Reopen();
  const std::string moved = "/lost+found/#" + std::to_string(gone.attr().ino());
  rpc::ChunkReply opened = Open(moved, root_, session_);
  ASSERT_EQ(opened.error(), 0);
  EXPECT_EQ(opened.attr().ino(), gone.attr().ino());
  EXPECT_EQ(Open("/gone/f", root_, session_).error(), ENOENT);
  IndexEntries seen = ReadIndexEntries(index_path, moved, gone.attr().ino());
  EXPECT_EQ(seen.under_path, 1);
  EXPECT_EQ(seen.of[gone.attr().ino()], 1);

  // Two records naming one place: the later one goes to /lost+found (which
  // is there now), and the index does not give it the earlier one's path.
  EditDatabase([&](const MetaDb::Contents &contents, MetaDb::Batch *batch) {
    for (schema::Inode r : contents.inodes)
      if (r.ino() == clash.attr().ino()) {
        r.set_parent(kept.attr().parent());
        batch->PutInode(r);
      }
  });
  Reopen();
  const std::string clash_moved = "/lost+found/#" + std::to_string(clash.attr().ino());
  EXPECT_EQ(Open(clash_moved, root_, session_).attr().ino(), clash.attr().ino());
  EXPECT_EQ(Open("/kept/g", root_, session_).attr().ino(), kept.attr().ino());
  seen = ReadIndexEntries(index_path, "/kept/g", kept.attr().ino());
  EXPECT_EQ(seen.under_path, 1);
  EXPECT_EQ(seen.under_path_for_others, 0) << "the index gave a path to an inode that lost it";
  EXPECT_EQ(ReadIndexEntries(index_path, clash_moved, clash.attr().ino()).under_path, 1);
  EXPECT_EQ(seen.of[clash.attr().ino()], 1);
}

// client_limits.h: a session other than root's may hold only so much.
TEST_F(EngineTest, PerSessionCapsRefuseWithEmfileButSpareRoot) {
  EngineOptions options;
  options.limits.reservations_per_session = 2;
  options.limits.pins_per_session = 2;
  Reopen(options);
  const uint64_t alice = NewSession(alice_);
  ASSERT_EQ(Create("/a/0", 4096, alice_, alice).error(), 0);
  rpc::ChunkReply second = Create("/a/1", 4096, alice_, alice);
  ASSERT_EQ(second.error(), 0);
  EXPECT_EQ(Create("/a/2", 4096, alice_, alice).error(), EMFILE);
  ASSERT_EQ(Seal(second, alice_, alice).error(), 0);  // one reservation fewer
  rpc::ChunkReply third = Create("/a/2", 4096, alice_, alice);
  ASSERT_EQ(third.error(), 0);
  ASSERT_EQ(Seal(third, alice_, alice).error(), 0);
  auto pin = [&](const std::string &path, bool on) {
    auto req = With<rpc::PinRequest>(alice);
    req.mutable_ref()->set_path(path);
    req.set_pin(on);
    rpc::AttrReply rep;
    engine_->Pin(alice_, req, &rep);
    return rep.error();
  };
  EXPECT_EQ(pin("/a/1", true), 0);
  EXPECT_EQ(pin("/a/2", true), 0);
  EXPECT_EQ(pin("/a/1", true), 0);  // already pinned: nothing more held
  EXPECT_EQ(pin("/a/0", true), EMFILE);
  EXPECT_EQ(pin("/a/1", false), 0);
  EXPECT_EQ(pin("/a/0", true), 0);
  // Root's sessions (maru-fuse holds one per mount) are not capped.
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(Create("/r/" + std::to_string(i), 4096, root_, session_).error(), 0);
}

// The pool's servers, as the leader's /metrics shows them (docs/ha.md).
TEST(MetricsTest, ShowTheLeadersEpochAndEachServersLag) {
  rpc::StatsReply st;
  st.set_leader_epoch(7);
  rpc::ServerMember *leader = st.add_members();
  leader->set_id("a");
  leader->set_leads(true);
  leader->set_electable(true);
  rpc::ServerMember *behind = st.add_members();
  behind->set_id("b\"");
  behind->set_lag_bytes(4096);
  const std::string text = RenderPrometheus(st);
  EXPECT_NE(text.find("maru_leader_epoch 7\n"), std::string::npos) << text;
  EXPECT_NE(text.find("maru_server_lag_bytes{member=\"a\",role=\"leader\"} 0\n"),
            std::string::npos);
  EXPECT_NE(text.find("maru_server_lag_bytes{member=\"b\\\"\",role=\"standby\"} 4096\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("maru_server_electable{member=\"b\\\"\"} 0\n"), std::string::npos);
}

}  // namespace
}  // namespace maru
