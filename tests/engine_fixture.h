// The engine fixtures: a MetaEngine on a test pool without the RPC layer,
// shared by the engine's tests and the quota tests.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness.h"
#include "meta/meta_db.h"
#include "meta/meta_engine.h"

namespace maru {

// A MetaEngine on a 64 MiB test pool (64 KiB units) with its database in
// a temporary directory, and the callers tests act as. Each suite opens the
// engine with its own options and sessions.
class EngineFixture : public ::testing::Test {
 protected:
  // Opens the engine anew on the same pool and database (the one open
  // closes first): no restart grace unless `options` asks for one. On a
  // failure engine_ stays null.
  void OpenEngine(EngineOptions options) {
    engine_.reset();
    options.pool_paths = {pool_.path()};
    options.db_dir = dir_.path() + "/db";
    if (options.grace_ms < 0) options.grace_ms = 0;
    Result<std::unique_ptr<MetaEngine>> e = MetaEngine::Open(options);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(*e);
  }

  uint64_t NewSession(const Caller &c) {
    rpc::OpenSessionRequest req;
    rpc::OpenSessionReply rep;
    engine_->OpenSession(c, req, &rep);
    return rep.session();
  }

  template <typename Req>
  Req With(uint64_t session) {
    Req r;
    r.mutable_header()->set_session(session);
    return r;
  }

  maru_test::TempDir dir_;
  // Its whole size for data, and the index in a file (read by the tests).
  maru_test::TestPool pool_{64ull << 20, 64u << 10, "", "--index-size 0"};
  std::unique_ptr<MetaEngine> engine_;
  Caller root_{0, 0, {}, 0};
  Caller alice_{1000, 1000, {}, 0};
  Caller bob_{1001, 1001, {}, 0};
};

// The engine as most tests drive it: sessions expire after 200 ms, root
// holds session_, and the requests most tests make, as the RPC layer would
// make them.
class EngineTest : public EngineFixture {
 protected:
  void SetUp() override { Reopen(); }

  void Reopen(EngineOptions options = {}) {
    options.session_timeout_ms = 200;
    OpenEngine(options);
    if (engine_) session_ = NewSession(root_);
  }

  // Changes the database while the engine is down (it stays down): `edit`
  // puts what it changes into the batch, which must not stay empty.
  void EditDatabase(const std::function<void(const MetaDb::Contents &, MetaDb::Batch *)> &edit) {
    engine_.reset();
    Result<std::unique_ptr<MetaDb>> db = MetaDb::Open(dir_.path() + "/db", false);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    Result<MetaDb::Contents> contents = (*db)->Load();
    ASSERT_TRUE(contents.ok());
    MetaDb::Batch batch;
    edit(*contents, &batch);
    ASSERT_FALSE(batch.empty());
    ASSERT_TRUE((*db)->Write(batch).ok());
  }

  rpc::ChunkReply Create(const std::string &path, uint64_t size, const Caller &c, uint64_t s,
                         bool truncate = false) {
    auto req = With<rpc::CreateRequest>(s);
    req.mutable_ref()->set_path(path);
    req.set_size(size);
    req.set_mode(0644);
    req.set_parents(true);
    req.set_truncate(truncate);
    rpc::ChunkReply rep;
    engine_->Create(c, req, &rep);
    return rep;
  }

  rpc::ChunkReply Seal(const rpc::ChunkReply &created, const Caller &c, uint64_t s,
                       bool keep = false) {
    auto req = With<rpc::SealRequest>(s);
    req.set_ino(created.attr().ino());
    req.set_gen(created.attr().gen());
    req.set_size(created.attr().size());
    req.set_keep_lease(keep);
    rpc::ChunkReply rep;
    engine_->Seal(c, req, &rep);
    return rep;
  }

  rpc::ChunkReply Open(const std::string &path, const Caller &c, uint64_t s) {
    auto req = With<rpc::RefRequest>(s);
    req.mutable_ref()->set_path(path);
    rpc::ChunkReply rep;
    engine_->Open(c, req, &rep);
    return rep;
  }

  int Unlink(const std::string &path, const Caller &c, uint64_t s) {
    auto req = With<rpc::RefRequest>(s);
    req.mutable_ref()->set_path(path);
    rpc::ErrorReply rep;
    engine_->Unlink(c, req, &rep);
    return rep.error();
  }

  int Rename(const std::string &from, const std::string &to, const Caller &c, uint64_t s,
             bool noreplace = false) {
    auto req = With<rpc::RenameRequest>(s);
    req.mutable_from()->set_path(from);
    req.mutable_to()->set_path(to);
    req.set_noreplace(noreplace);
    rpc::ErrorReply rep;
    engine_->Rename(c, req, &rep);
    return rep.error();
  }

  rpc::StatfsReply Statfs() {
    auto req = With<rpc::StatfsRequest>(session_);
    rpc::StatfsReply rep;
    engine_->Statfs(root_, req, &rep);
    return rep;
  }

  std::vector<std::string> Fsck() {
    auto req = With<rpc::StatsRequest>(session_);
    rpc::FsckReply rep;
    engine_->Fsck(root_, req, &rep);
    return {rep.problems().begin(), rep.problems().end()};
  }

  uint64_t session_ = 0;
};

}  // namespace maru
