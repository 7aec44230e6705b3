// Space through a version's life: allocated (evicting when the pool is
// full), retired when its file is removed or rewritten or its reservation
// dropped, and freed once no lease, writer or index slot holds it
// (SpaceManager). Removing a file or a reservation lives here because that
// is what retires the space behind it.
#include "meta/engine_op.h"
#include "meta/meta_engine.h"
#include "meta/pool_scrub.h"
#include "util/clock.h"

namespace maru {

// What still reads `v` once it is retired counts for the uids that hold it
// (QuotaTable::HoldRead) until they let go: removing a file one reads no
// longer takes its space out of every quota.
void MetaEngine::RetireVersion(Txn &txn, const Version &v, uint64_t ino, bool writing) {
  space_.Retire(v.gen, v.extents, &txn.batch, writing ? &v : nullptr, ino);
  auto kept = space_.retired().find(v.gen);
  if (kept == space_.retired().end()) return;
  const uint64_t bytes = TotalLength(kept->second);
  for (uint32_t uid : leases_.Holders(v.gen)) quotas_.HoldRead(v.gen, uid, bytes);
  if (index_)
    for (uint32_t uid : index_->SlotHolders(v.gen)) quotas_.HoldRead(v.gen, uid, bytes);
}

void MetaEngine::LeaseEnded(Txn &txn, uint64_t id, const Lease &lease) {
  parts_.LeaseGone(id);
  if (!leases_.Held(lease.gen, lease.uid)) quotas_.UnholdRead(lease.gen, lease.uid);
  UnrefGen(txn, lease.gen);
}

void MetaEngine::UnrefGen(Txn &txn, uint64_t gen) {
  quotas_.Unhold(gen);  // a writer letting go of space it held under no name
  space_.Unref(gen, &txn.batch);
  evictor_->Unreferenced(gen);
}

// Takes a file's content out of reach: the sealed version is retired, and a
// reservation still being written becomes an orphan its writer can only
// abort.
void MetaEngine::RemoveFile(Txn &txn, Inode *inode) {
  tree_.Unlink(inode);
  evictor_->Removed(*inode);
  quotas_.Forget(inode->ino);
  if (inode->pinned) --pins_;
  if (inode->current) RetireVersion(txn, *inode->current, inode->ino, false);
  if (inode->pending) {
    if (Session *s = sessions_.Find(inode->pending->writer_session)) {
      s->reservations.erase(inode->ino);
      s->orphan_gens.insert(inode->pending->gen);
      quotas_.Hold(inode->pending->gen, inode->pending->charged_uid,
                   TotalLength(inode->pending->extents));
    }
    reserved_bytes_ -= TotalLength(inode->pending->extents);
    parts_.Ended(inode->pending->gen, PartTable::State::kAborted);
    RetireVersion(txn, *inode->pending, inode->ino, true);
  }
  txn.Deleted(inode->ino);
  tree_.Release(inode->ino);
}

// Children before their directory, on a stack of its own: the depth is
// the users' to choose.
void MetaEngine::RemoveTree(Txn &txn, Inode *top) {
  std::vector<std::pair<uint64_t, bool>> todo{{top->ino, false}};  // (ino, children done)
  while (!todo.empty()) {
    auto [ino, expanded] = todo.back();
    Inode *inode = tree_.Find(ino);
    if (!inode) {
      todo.pop_back();
    } else if (!inode->is_dir()) {
      todo.pop_back();
      RemoveFile(txn, inode);
    } else if (!expanded) {
      todo.back().second = true;
      for (const auto &[name, child] : inode->children) todo.emplace_back(child, false);
    } else {
      todo.pop_back();
      tree_.Unlink(inode);
      txn.Deleted(inode->ino);
      tree_.Release(inode->ino);
    }
  }
}

// Ends a reservation without publishing it. A file that never had a sealed
// version disappears with it.
void MetaEngine::DropPending(Txn &txn, Inode *inode, bool keep_inode_record) {
  Version v = std::move(*inode->pending);
  inode->pending.reset();
  reserved_bytes_ -= TotalLength(v.extents);
  quotas_.Update(*inode);
  if (Session *s = sessions_.Find(v.writer_session)) s->reservations.erase(inode->ino);
  UnrefGen(txn, v.gen);
  RetireVersion(txn, v, inode->ino, false);
  parts_.Ended(v.gen, PartTable::State::kAborted);
  if (inode->current || keep_inode_record) {
    txn.Dirty(inode);
    return;
  }
  if (Inode *dir = tree_.Find(inode->parent)) TouchDir(txn, dir);
  if (inode->pinned) --pins_;
  quotas_.Forget(inode->ino);
  evictor_->Removed(*inode);  // it was named in the chains at its create
  tree_.Unlink(inode);
  txn.Deleted(inode->ino);
  tree_.Release(inode->ino);
}

Evictor::Scope MetaEngine::EvictionScope(Txn &txn) {
  NoteIndexReads();  // the order the evictor reads includes reads without messages
  return Evictor::Scope{[this, &txn](Inode *inode) REQUIRES(mu_) { RemoveFile(txn, inode); },
                        &txn.batch};
}

Result<ExtentList> MetaEngine::AllocateForWriter(Txn &txn, const Caller &c, uint64_t bytes,
                                                 uint64_t spared, bool contiguous) {
  Result<ExtentList> got = AllocateWithEviction(txn, bytes, spared);
  if (!got.ok()) return got.status();
  if (contiguous && got->size() > 1) {
    space_.FreeNow(*got);
    return Status::Error(ENOSPC, "no free run holds it in one extent");
  }
  if (Status s = ScrubForWriter(space_, c, *got); !s.ok()) {
    space_.FreeNow(*got);
    return s;
  }
  return got;
}

Result<ExtentList> MetaEngine::AllocateWithEviction(Txn &txn, uint64_t bytes, uint64_t spared) {
  Result<ExtentList> extents = space_.Allocate(bytes);
  auto full = [&] { return !extents.ok() && extents.status().errnum() == ENOSPC; };
  // Space waiting for readers that are gone is free for the taking first.
  if (full() && space_.Tick(MonotonicNs(), &txn.batch) > 0) extents = space_.Allocate(bytes);
  if (full()) {
    MARU_RETURN_IF_ERROR(evictor_->MakeRoom(EvictionScope(txn), bytes, spared));
    extents = space_.Allocate(bytes);
  }
  if (extents.ok() && extents->size() > options_.max_fragments) {
    space_.FreeNow(*extents);
    return Status::Error(ENOSPC, "pool too fragmented");
  }
  return extents;
}

}  // namespace maru
