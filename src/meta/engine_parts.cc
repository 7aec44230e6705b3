// Layer-wise chunks: a writer publishes a chunk part by part
// (PublishPart) while it computes the next; readers open it before it is
// sealed (OpenPartial) and wait for each part (WaitPart).
//
// The wait is a server wait: the reader's call is held here, asleep on the
// part table's condition, until the writer publishes, seals, aborts or its
// session is reaped. The server is the one party that sees a writer die
// (its session times out), so a reader learns of it without polling and
// without trusting a word in shared memory that a dead writer left behind.
// Each wait holds a server thread (the fast lane's connection thread), so
// waits are capped per session and in all (PartTable) and each call waits
// at most PartTable::kMaxWaitMs; the client calls again.
#include <algorithm>
#include <chrono>

#include "meta/engine_op.h"
#include "meta/meta_engine.h"

namespace maru {

void MetaEngine::OpenPartial(const Caller &c, const rpc::RefRequest &req, rpc::ChunkReply *rep) {
  RunOp(c, req, rep, [&](Txn &, Session *session) REQUIRES(mu_) -> Status {
    ++lookups_;
    Result<Inode *> found = tree_.Resolve(req.ref(), c);
    if (!found.ok()) return found.status();
    Inode *inode = *found;
    if (inode->is_file() && !inode->current && inode->pending) {
      MARU_RETURN_IF_ERROR(OpenPartialPending(c, session, inode, rep));
    } else {
      MARU_RETURN_IF_ERROR(OpenForRead(c, session, inode, rep));
      const uint32_t parts = std::max<uint32_t>(inode->current->parts, 1);
      rep->set_parts(parts);
      rep->set_published(parts);
    }
    ++lookup_hits_;
    return Status::Ok();
  });
}

// A read lease on a reservation: the same rules as OpenForRead, and the
// lease keeps the extents whatever becomes of the writer.
Status MetaEngine::OpenPartialPending(const Caller &c, Session *s, Inode *inode,
                                      rpc::ChunkReply *rep) {
  if (!MayAccess(*inode, c, kMayRead)) return Status::Error(EACCES);
  if (int err = CheckLeaseCount(*s)) return Status::Error(err, "too many leases in this session");
  const Version &v = *inode->pending;
  const uint64_t lease = leases_.Grant(s->id, inode->ino, v.gen, c.uid);
  s->leases.insert(lease);
  space_.Ref(v.gen);
  parts_.LeaseGranted(lease, v.gen);
  FillChunk(*inode, v, lease, rep, true);
  rep->set_parts(std::max<uint32_t>(v.parts, 1));
  rep->set_published(v.published);
  rep->set_writing(true);
  return Status::Ok();
}

void MetaEngine::PublishPart(const Caller &c, const rpc::PartRequest &req, rpc::PartReply *rep) {
  RunOp(c, req, rep, [&](Txn &, Session *session) REQUIRES(mu_) -> Status {
    Inode *inode = tree_.Find(req.ino());
    if (!inode || !inode->pending || inode->pending->gen != req.gen())
      return Status::Error(session->orphan_gens.count(req.gen()) ? ENOENT : ESTALE);
    Version &v = *inode->pending;
    if (v.writer_session != session->id) return Status::Error(EPERM);
    if (req.upto() >= std::max<uint32_t>(v.parts, 1)) return Status::Error(EINVAL, "no such part");
    // Monotonic: publishing a published part again changes nothing.
    if (req.upto() >= v.published) {
      v.published = static_cast<uint16_t>(req.upto() + 1);  // below parts
      parts_.Published(v.gen);
    }
    rep->set_published(v.published);
    return Status::Ok();
  });
}

int MetaEngine::PartState(uint64_t ino, uint64_t gen, uint32_t part, rpc::PartReply *rep) {
  const Inode *inode = tree_.Find(ino);
  if (inode && inode->pending && inode->pending->gen == gen) {
    const Version &v = *inode->pending;
    if (part >= std::max<uint32_t>(v.parts, 1)) return EINVAL;
    rep->set_published(v.published);
    return part < v.published ? 0 : EAGAIN;
  }
  if (inode && inode->current && inode->current->gen == gen) {
    const uint32_t parts = std::max<uint32_t>(inode->current->parts, 1);
    if (part >= parts) return EINVAL;
    rep->set_published(parts);
    rep->set_sealed(true);
    return 0;
  }
  // Gone from the namespace: sealed and since replaced or removed (the
  // reader's lease still holds the bytes), or never sealed.
  std::shared_ptr<PartTable::Entry> entry = parts_.Find(gen);
  if (entry && entry->state == PartTable::State::kSealed) {
    rep->set_sealed(true);
    return 0;
  }
  return ECONNABORTED;
}

void MetaEngine::WaitPart(const Caller &c, const rpc::PartRequest &req, rpc::PartReply *rep) {
  MutexLock lock(&mu_);
  Result<Session *> found = LiveSession(c, req.header().session());
  if (!found.ok()) return rep->set_error(found.status().errnum());
  const uint64_t session = (*found)->id;  // the Session may go while this sleeps
  const uint32_t uid = (*found)->uid;
  if (req.header().release_size()) {
    Txn txn(this);
    ReleaseLeases(txn, *found, req.header().release());
    txn.Commit();
  }
  // Only the holder of a lease on the version may wait on it: the lease was
  // granted after the same permission checks as Open.
  const Lease *lease = leases_.Find(req.lease());
  if (!lease || lease->session != session || lease->gen != req.gen()) return rep->set_error(ESTALE);
  const uint64_t ino = lease->ino, gen = lease->gen;
  int err = PartState(ino, gen, req.upto(), rep);
  if (err != EAGAIN) return rep->set_error(err);
  std::shared_ptr<PartTable::Entry> entry = parts_.Find(gen);
  if (!entry) return rep->set_error(ESTALE);
  if (int cap = parts_.AddWaiter(session, uid)) return rep->set_error(cap);
  if (req.timeout_ms() == 0) {  // just a look (which also tells whether a wait would fit)
    parts_.RemoveWaiter(session, uid);
    return rep->set_error(ETIMEDOUT);
  }
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(std::min<uint32_t>(req.timeout_ms(), PartTable::kMaxWaitMs));
  for (;;) {
    const bool timed_out = !entry->changed.WaitUntil(&mu_, deadline);
    // Released by another thread of the client, or its session expired.
    const Lease *still = leases_.Find(req.lease());
    if (!still || still->session != session) {
      err = ESTALE;
      break;
    }
    err = PartState(ino, gen, req.upto(), rep);
    if (err != EAGAIN) break;
    if (timed_out) {
      err = ETIMEDOUT;
      break;
    }
  }
  parts_.RemoveWaiter(session, uid);
  rep->set_error(err);
}

}  // namespace maru
