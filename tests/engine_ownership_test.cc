// Trust boundaries in MetaEngine: sessions belong to their uid. Another uid
// may not abort, close, seal, publish, resume or renew in a session it does
// not own; root and the mount daemon may act for others.
#include <gtest/gtest.h>

#include <string>

#include "engine_fixture.h"

namespace maru {
namespace {

class OwnershipTest : public EngineTest {
 protected:
  // maru-fuse: a root peer asserting bob's identity.
  Caller BobViaDaemon() const {
    Caller c = bob_;
    c.via_trusted_daemon = true;
    return c;
  }

  int Abort(const rpc::ChunkReply &created, const Caller &c, uint64_t s) {
    auto req = With<rpc::HandleRequest>(s);
    req.set_ino(created.attr().ino());
    req.set_gen(created.attr().gen());
    rpc::ErrorReply rep;
    engine_->Abort(c, req, &rep);
    return rep.error();
  }

  int Close(const Caller &c, uint64_t s) {
    auto req = With<rpc::HeartbeatRequest>(s);
    rpc::ErrorReply rep;
    engine_->CloseSession(c, req, &rep);
    return rep.error();
  }

  int Heartbeat(const Caller &c, uint64_t s) {
    auto req = With<rpc::HeartbeatRequest>(s);
    rpc::HeartbeatReply rep;
    engine_->Heartbeat(c, req, &rep);
    return rep.error();
  }

  int Release(uint64_t lease, const Caller &c, uint64_t s) {
    auto req = With<rpc::ReleaseRequest>(s);
    req.add_leases(lease);
    rpc::ErrorReply rep;
    engine_->Release(c, req, &rep);
    return rep.error();
  }

  rpc::AttrReply GetAttrByIno(uint64_t ino, const Caller &c, uint64_t s) {
    auto req = With<rpc::RefRequest>(s);
    req.mutable_ref()->set_ino(ino);
    rpc::AttrReply rep;
    engine_->GetAttr(c, req, &rep);
    return rep;
  }

  // A world-writable directory both users share.
  void SharedDir() {
    auto req = With<rpc::MkdirRequest>(session_);
    req.mutable_ref()->set_path("/shared");
    req.set_mode(01777);
    rpc::AttrReply rep;
    engine_->Mkdir(root_, req, &rep);
    ASSERT_EQ(rep.error(), 0);
  }
};

TEST_F(OwnershipTest, AnotherUidCannotAbortAVictimsWrite) {
  SharedDir();
  uint64_t victim = NewSession(alice_), attacker = NewSession(bob_);
  rpc::ChunkReply w = Create("/shared/w", 4096, alice_, victim);
  ASSERT_EQ(w.error(), 0);
  EXPECT_EQ(Abort(w, bob_, victim), EPERM);    // the victim's session id as a password
  EXPECT_EQ(Abort(w, bob_, attacker), EPERM);  // its own session: not the writer
  EXPECT_EQ(Seal(w, bob_, victim).error(), EPERM);
  auto extend = With<rpc::ExtendRequest>(victim);
  extend.set_ino(w.attr().ino());
  extend.set_gen(w.attr().gen());
  extend.set_size(8192);
  rpc::ChunkReply extended;
  engine_->Extend(bob_, extend, &extended);
  EXPECT_EQ(extended.error(), EPERM);
  EXPECT_EQ(Seal(w, alice_, victim).error(), 0);
}

TEST_F(OwnershipTest, AnotherUidCannotCloseAReadersSession) {
  SharedDir();
  uint64_t reader = NewSession(alice_);
  ASSERT_EQ(Seal(Create("/shared/r", 4096, alice_, reader), alice_, reader).error(), 0);
  rpc::ChunkReply held = Open("/shared/r", alice_, reader);
  ASSERT_EQ(held.error(), 0);
  EXPECT_EQ(Close(bob_, reader), EPERM);
  EXPECT_EQ(Heartbeat(bob_, reader), EPERM);
  EXPECT_EQ(Release(held.lease(), bob_, reader), EPERM);
  EXPECT_EQ(Open("/shared/r", bob_, reader).error(), EPERM);
  // The reader's lease still stands: its space is not freed under it.
  ASSERT_EQ(Unlink("/shared/r", alice_, reader), 0);
  rpc::ChunkReply other = Create("/shared/other", 4096, alice_, reader);
  ASSERT_EQ(other.error(), 0);
  EXPECT_NE(other.extents(0).offset(), held.extents(0).offset());
  EXPECT_EQ(Heartbeat(alice_, reader), 0);
  EXPECT_EQ(Close(alice_, reader), 0);
}

TEST_F(OwnershipTest, AnotherUidCannotSealOrPublishABatchInAVictimsSession) {
  SharedDir();
  uint64_t victim = NewSession(alice_);
  rpc::ChunkReply w = Create("/shared/b", 4096, alice_, victim);
  ASSERT_EQ(w.error(), 0);
  auto seals = With<rpc::SealBatchRequest>(victim);
  rpc::SealRequest *one = seals.add_seals();
  one->set_ino(w.attr().ino());
  one->set_gen(w.attr().gen());
  rpc::ChunkBatchReply sealed;
  engine_->SealBatch(bob_, seals, &sealed);
  EXPECT_EQ(sealed.error(), EPERM);
  auto publish = With<rpc::PublishRequest>(victim);
  publish.set_path("/shared/p");
  rpc::ChunkReply published;
  engine_->Publish(bob_, publish, &published);
  EXPECT_EQ(published.error(), EPERM);
}

TEST_F(OwnershipTest, RootAndTheMountDaemonMayActForOthers) {
  SharedDir();
  uint64_t mine = NewSession(alice_);
  rpc::ChunkReply w = Create("/shared/root-may", 4096, alice_, mine);
  ASSERT_EQ(w.error(), 0);
  EXPECT_EQ(Heartbeat(root_, mine), 0);
  // maru-fuse's session is root's; it asserts each caller.
  rpc::ChunkReply via = Create("/shared/via-fuse", 4096, BobViaDaemon(), session_);
  ASSERT_EQ(via.error(), 0);
  EXPECT_EQ(Seal(via, BobViaDaemon(), session_).error(), 0);
  EXPECT_EQ(Abort(w, root_, mine), 0);
}

TEST_F(OwnershipTest, AddressingByInodeNumberIsForRootAndTheMountDaemon) {
  auto mkdir = With<rpc::MkdirRequest>(session_);
  mkdir.mutable_ref()->set_path("/locked");
  mkdir.set_mode(0700);
  rpc::AttrReply dir;
  engine_->Mkdir(root_, mkdir, &dir);
  ASSERT_EQ(dir.error(), 0);
  rpc::ChunkReply f = Create("/locked/open-file", 4096, root_, session_);
  ASSERT_EQ(Seal(f, root_, session_).error(), 0);
  auto setattr = With<rpc::SetAttrRequest>(session_);
  setattr.mutable_ref()->set_path("/locked/open-file");
  setattr.set_mode(0644);
  setattr.set_set_mode(true);
  rpc::AttrReply set;
  engine_->SetAttr(root_, setattr, &set);
  ASSERT_EQ(set.error(), 0);
  uint64_t bob = NewSession(bob_);
  EXPECT_EQ(Open("/locked/open-file", bob_, bob).error(), EACCES);  // no search permission
  EXPECT_EQ(GetAttrByIno(f.attr().ino(), bob_, bob).error(), EPERM);
  auto open = With<rpc::RefRequest>(bob);
  open.mutable_ref()->set_ino(f.attr().ino());
  rpc::ChunkReply opened;
  engine_->Open(bob_, open, &opened);
  EXPECT_EQ(opened.error(), EPERM);
  auto by_name = With<rpc::RefRequest>(bob);
  by_name.mutable_ref()->set_ino(dir.attr().ino());
  by_name.mutable_ref()->set_name("open-file");
  engine_->Open(bob_, by_name, &opened);
  EXPECT_EQ(opened.error(), EPERM);
  EXPECT_EQ(GetAttrByIno(f.attr().ino(), root_, session_).error(), 0);
  // Through the mount daemon, the number is allowed but the way there is
  // still searched: /locked is closed to bob.
  EXPECT_EQ(GetAttrByIno(f.attr().ino(), BobViaDaemon(), session_).error(), EACCES);
}

TEST_F(OwnershipTest, ANewSessionCannotClaimHeldLeasesOnAnotherUidsDeletedChunk) {
  SharedDir();
  uint64_t victim = NewSession(alice_);
  rpc::ChunkReply secret = Create("/shared/secret", 4096, alice_, victim);
  ASSERT_EQ(Seal(secret, alice_, victim).error(), 0);
  ASSERT_EQ(Open("/shared/secret", alice_, victim).error(), 0);  // keeps it retired
  ASSERT_EQ(Unlink("/shared/secret", alice_, victim), 0);
  rpc::ChunkReply own = Create("/shared/own", 4096, bob_, NewSession(bob_));
  rpc::OpenSessionRequest claim;
  for (uint64_t ino : {secret.attr().ino(), own.attr().ino()}) {
    rpc::HeldLease *h = claim.add_held();
    h->set_lease(ino);
    h->set_ino(ino);
    h->set_gen(secret.attr().gen());
  }
  claim.set_resume(victim);  // a live session of another uid: not resumed
  rpc::OpenSessionReply rep;
  engine_->OpenSession(bob_, claim, &rep);
  EXPECT_FALSE(rep.resumed());
  EXPECT_NE(rep.session(), victim);
  EXPECT_EQ(rep.renewed_size(), 0);
}

TEST_F(OwnershipTest, HeldLeasesOnCurrentVersionsAreRenewedOnlyWhereTheyCouldBeOpened) {
  auto mkdir = With<rpc::MkdirRequest>(session_);
  mkdir.mutable_ref()->set_path("/locked");
  mkdir.set_mode(0700);
  rpc::AttrReply dir;
  engine_->Mkdir(root_, mkdir, &dir);
  rpc::ChunkReply hidden = Create("/locked/f", 4096, root_, session_);
  ASSERT_EQ(Seal(hidden, root_, session_).error(), 0);
  rpc::ChunkReply open = Create("/f", 4096, root_, session_);
  ASSERT_EQ(Seal(open, root_, session_).error(), 0);
  rpc::OpenSessionRequest claim;
  for (const rpc::ChunkReply *c : {&hidden, &open}) {
    rpc::HeldLease *h = claim.add_held();
    h->set_lease(c->attr().ino());
    h->set_ino(c->attr().ino());
    h->set_gen(c->attr().gen());
  }
  rpc::OpenSessionReply rep;
  engine_->OpenSession(bob_, claim, &rep);
  ASSERT_EQ(rep.renewed_size(), 1);  // /f (0644 by default) only
  EXPECT_EQ(rep.renewed(0).lease(), open.attr().ino());
}

// A session that read a version which a rewrite retired takes its lease
// back after a restart; it cannot name another file's retired version
// (generations are counted, not secret) on a file it may open.
TEST_F(OwnershipTest, AResumeRenewsARetiredVersionOnlyOfTheFileItCameFrom) {
  SharedDir();
  uint64_t victim = NewSession(alice_);
  rpc::ChunkReply secret = Create("/shared/secret", 4096, alice_, victim);
  ASSERT_EQ(Seal(secret, alice_, victim).error(), 0);
  ASSERT_EQ(Open("/shared/secret", alice_, victim).error(), 0);
  ASSERT_EQ(Unlink("/shared/secret", alice_, victim), 0);  // retired, still read
  uint64_t bob = NewSession(bob_);
  rpc::ChunkReply v1 = Create("/shared/own", 4096, bob_, bob);
  ASSERT_EQ(Seal(v1, bob_, bob).error(), 0);
  ASSERT_EQ(Open("/shared/own", bob_, bob).error(), 0);
  ASSERT_EQ(Seal(Create("/shared/own", 4096, bob_, bob, true), bob_, bob).error(), 0);
  ASSERT_EQ(Create("/shared/writing", 4096, bob_, bob).error(), 0);  // bob's session outlives
  EngineOptions options;
  options.grace_ms = 60000;  // retired versions wait for their readers to come back
  Reopen(options);
  rpc::OpenSessionRequest claim;
  claim.set_resume(bob);
  for (uint64_t gen : {secret.attr().gen(), v1.attr().gen()}) {
    rpc::HeldLease *h = claim.add_held();
    h->set_lease(gen);
    h->set_ino(v1.attr().ino());
    h->set_gen(gen);
  }
  rpc::OpenSessionReply rep;
  engine_->OpenSession(bob_, claim, &rep);
  ASSERT_TRUE(rep.resumed());
  ASSERT_EQ(rep.renewed_size(), 1);
  EXPECT_EQ(rep.renewed(0).lease(), v1.attr().gen());
}

// CheckExtents is maru-agent's question (root), about the session and uid
// of a grant it verified: a session of any other uid is no.
TEST_F(OwnershipTest, CheckExtentsIsRootsAndAnswersForTheGrantsUidOnly) {
  SharedDir();
  uint64_t s = NewSession(alice_);
  rpc::ChunkReply sealed = Seal(Create("/shared/x", 4096, alice_, s), alice_, s, true);
  ASSERT_EQ(sealed.error(), 0);
  ASSERT_GT(sealed.extents_size(), 0);
  auto check = [&](const Caller &c, uint64_t caller_session, uint32_t uid) {
    auto req = With<rpc::CheckExtentsRequest>(caller_session);
    req.set_client_session(s);
    req.set_client_uid(uid);
    req.set_device(sealed.extents(0).device());
    *req.add_extents() = sealed.extents(0);
    rpc::ErrorReply rep;
    engine_->CheckExtents(c, req, &rep);
    return rep.error();
  };
  EXPECT_EQ(check(root_, session_, alice_.uid), 0);
  EXPECT_EQ(check(root_, session_, bob_.uid), ESTALE);
  EXPECT_EQ(check(root_, session_, 0), ESTALE);
  EXPECT_EQ(check(alice_, s, alice_.uid), EPERM);
  EXPECT_EQ(check(bob_, NewSession(bob_), alice_.uid), EPERM);
}

// A reader of a chunk still being written (OpenPartial) is granted only
// the parts published so far: never the unwritten bytes, which may still
// hold a deleted chunk's, through the agent.
TEST_F(OwnershipTest, APartialReaderHoldsOnlyWhatWasPublished) {
  SharedDir();
  uint64_t writer = NewSession(alice_);
  rpc::ChunkReply w = Create("/shared/w", 4096, alice_, writer);
  ASSERT_EQ(w.error(), 0);
  ASSERT_GT(w.extents_size(), 0);
  uint64_t reader = NewSession(bob_);
  auto open = With<rpc::RefRequest>(reader);
  open.mutable_ref()->set_path("/shared/w");
  rpc::ChunkReply partial;
  engine_->OpenPartial(bob_, open, &partial);
  ASSERT_EQ(partial.error(), 0);
  auto check = [&] {
    auto req = With<rpc::CheckExtentsRequest>(session_);
    req.set_client_session(reader);
    req.set_client_uid(bob_.uid);
    req.set_device(w.extents(0).device());
    *req.add_extents() = w.extents(0);
    rpc::ErrorReply rep;
    engine_->CheckExtents(root_, req, &rep);
    return rep.error();
  };
  EXPECT_EQ(check(), ESTALE);  // nothing published: nothing to read
  ASSERT_EQ(Seal(w, alice_, writer).error(), 0);
  EXPECT_EQ(check(), 0);  // sealed: the whole chunk
}

TEST_F(OwnershipTest, AResumeCannotPickItsSessionId) {
  rpc::OpenSessionRequest req;
  req.set_resume(0x1234567);
  rpc::OpenSessionReply rep;
  engine_->OpenSession(alice_, req, &rep);
  EXPECT_FALSE(rep.resumed());
  EXPECT_NE(rep.session(), 0x1234567u);
}

TEST_F(OwnershipTest, AWritersSessionIdIsShownOnlyToItsOwnerAndRoot) {
  SharedDir();
  uint64_t writer = NewSession(alice_);
  rpc::ChunkReply w = Create("/shared/writing", 4096, alice_, writer);
  ASSERT_EQ(w.error(), 0);
  auto stat = [&](const Caller &c, uint64_t s) {
    auto req = With<rpc::RefRequest>(s);
    req.mutable_ref()->set_path("/shared/writing");
    rpc::AttrReply rep;
    engine_->GetAttr(c, req, &rep);
    EXPECT_EQ(rep.error(), 0);
    return rep.attr().writer_session();
  };
  EXPECT_EQ(stat(bob_, NewSession(bob_)), 0u);
  EXPECT_EQ(stat(alice_, writer), writer);
  EXPECT_EQ(stat(root_, session_), writer);
}

TEST_F(OwnershipTest, OverlappingExtentsAtLoadStopTheServer) {
  ASSERT_EQ(Seal(Create("/a", 4096, root_, session_), root_, session_).error(), 0);
  EditDatabase([](const MetaDb::Contents &contents, MetaDb::Batch *batch) {
    for (schema::Inode r : contents.inodes) {
      if (r.name() != "a") continue;
      r.set_ino(r.ino() + 1000);  // a second file claiming the same extents
      r.set_name("b");
      r.mutable_current()->set_gen(r.current().gen() + 1000);
      batch->PutInode(r);
    }
  });
  EngineOptions options;
  options.pool_paths = {pool_.path()};
  options.db_dir = dir_.path() + "/db";
  Result<std::unique_ptr<MetaEngine>> e = MetaEngine::Open(options);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().ToString().find("maructl fsck"), std::string::npos) << e.status().ToString();
}

}  // namespace
}  // namespace maru
