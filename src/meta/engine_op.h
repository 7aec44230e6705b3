// One engine operation, for the files that define MetaEngine's operations
// (meta_engine.cc and the engine_*.cc files); not for the engine's users.
//
// An operation runs under the engine's lock and collects its changes in a
// Txn, written to the database in one batch at the end. RunOp wraps the
// usual shape: a live session, its piggybacked lease releases, the change,
// the commit, the first error into the reply.
#pragma once

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "meta/meta_engine.h"
#include "util/dcheck.h"
#include "util/log.h"

namespace maru {

// The exit status of a server that found it no longer leads (EX_TEMPFAIL):
// its service restarts it, as a standby.
constexpr int kNoLongerLeads = 75;

// The changes of one operation: inodes touched are written once at commit.
class MetaEngine::Txn {
 public:
  explicit Txn(MetaEngine *engine) : engine_(engine) {}
  // A changed inode may change whether it may be evicted (pin, reservation).
  // A Txn lives within one operation, under the engine's lock.
  void Dirty(const Inode *inode) {
    engine_->mu_.AssertHeld();
    MARU_DCHECK(!committed_);  // a change after the commit would be lost
    dirty_.insert(inode->ino);
    engine_->evictor_->Changed(*inode);
  }
  void Deleted(uint64_t ino) {
    MARU_DCHECK(!committed_);
    dirty_.erase(ino);
    batch.DeleteInode(ino);
  }
  Status Commit() {
    engine_->mu_.AssertHeld();
    MARU_DCHECK(!committed_);  // one operation, one commit
    committed_ = true;
    // A server that no longer leads must not touch the index, the log or
    // the database: a newer leader owns them (docs/ha.md). It stops here.
    if (engine_->options_.log_fence && !engine_->options_.log_fence()) {
      LOG_ERROR("this server no longer leads the pool: stopping before a write");
      std::_Exit(kNoLongerLeads);
    }
    for (uint64_t ino : dirty_)
      if (const Inode *inode = engine_->tree_.Find(ino)) {
        batch.PutInode(ToRecord(*inode));
        engine_->evictor_->Changed(*inode);  // changed after it was marked
        if (engine_->index_) engine_->index_->Changed(*inode);
      }
    if (engine_->index_) engine_->index_->Settle();
    dirty_.clear();
    if (batch.empty()) return Status::Ok();
    Status s = engine_->db_->Write(batch);
    if (!s.ok()) {
      // Memory already holds the change; carrying on would let the two
      // disagree. Stop, and let the restart load what was written.
      LOG_ERROR("metadata write failed, stopping: %s", s.ToString().c_str());
      std::_Exit(EXIT_FAILURE);
    }
    return s;
  }
  MetaDb::Batch batch;

 private:
  MetaEngine *engine_;
  std::set<uint64_t> dirty_;
  bool committed_ = false;
};

// Runs `op` under the lock for a live session of the caller (EPERM for
// another uid's: see LiveSession), commits what it changed, and reports the
// first error.
template <typename Req, typename Rep, typename Op>
void MetaEngine::RunOp(const Caller &c, const Req &req, Rep *rep, Op &&op) {
  MutexLock lock(&mu_);
  Result<Session *> found = LiveSession(c, req.header().session());
  if (!found.ok()) return rep->set_error(found.status().errnum());
  Session *session = *found;
  Txn txn(this);
  ReleaseLeases(txn, session, req.header().release());
  Status status = op(txn, session);
  Status committed = txn.Commit();
  if (status.ok()) status = committed;
  rep->set_error(status.errnum());
}

// True for each path that an earlier one of the batch already names: the
// batched operations answer it EEXIST.
std::vector<bool> RepeatedPaths(const google::protobuf::RepeatedPtrField<std::string> &paths);

}  // namespace maru
