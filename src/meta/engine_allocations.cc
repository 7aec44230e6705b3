// Allocations: space reserved under no name (maru_alloc) until published
// under a path. Until then it is a retired-while-written version of its
// session (Session::orphan_gens), so Abort, session expiry and a restart
// treat it as any reservation whose file went away. Publish names it with
// a create of no bytes and seals it at once.
#include "meta/engine_op.h"
#include "meta/meta_engine.h"

namespace maru {

void MetaEngine::Alloc(const Caller &c, const rpc::AllocRequest &req, rpc::ChunkReply *rep) {
  RunOp(c, req, rep, [&](Txn &txn, Session *session) REQUIRES(mu_) -> Status {
    if (req.size() == 0) return Status::Error(EINVAL, "an allocation needs a size");
    if (int err = CheckAllocation(options_.limits, *session))
      return Status::Error(err, "too many allocations in this session");
    MARU_RETURN_IF_ERROR(quotas_.MayReserve(*tree_.root(), c.uid, req.size()));
    Result<ExtentList> got = AllocateForWriter(txn, c, req.size(), 0, req.contiguous());
    if (!got.ok()) return got.status();
    Version v;
    v.gen = NextGen(txn);
    v.size = req.size();
    v.writer_session = session->id;
    v.writer_uid = session->uid;
    v.charged_uid = c.uid;
    // Held by the writer, recorded (with the writer) as retired: nothing
    // reuses it until the writer publishes it, aborts it or goes away.
    space_.Ref(v.gen);
    space_.Retire(v.gen, *got, &txn.batch, &v);
    session->orphan_gens.insert(v.gen);
    quotas_.Hold(v.gen, c.uid, TotalLength(*got));
    rpc::Attr *a = rep->mutable_attr();
    a->set_gen(v.gen);
    a->set_size(v.size);
    a->set_state(rpc::WRITING);
    a->set_allocated(TotalLength(*got));
    ToWireExtents(*got, rep->mutable_extents());
    return Status::Ok();
  });
}

void MetaEngine::Publish(const Caller &c, const rpc::PublishRequest &req, rpc::ChunkReply *rep) {
  RunOp(c, req, rep, [&](Txn &txn, Session *session) REQUIRES(mu_) -> Status {
    auto held = space_.retired().find(req.gen());
    if (!session->orphan_gens.count(req.gen()) || held == space_.retired().end())
      return Status::Error(ESTALE, "no such allocation of this session");
    if (req.size() > TotalLength(held->second))
      return Status::Error(EINVAL, "size exceeds the allocation");
    if (int err = CheckLeaseCount(*session))  // before any change: it keeps one
      return Status::Error(err, "too many leases in this session");
    // The allocation's charge moves to where it is named: checked there
    // without it, and put back if the name is refused. A refused name,
    // EEXIST included, leaves the allocation with its caller until released:
    // views of it may still be in use, so its space is never reused under them.
    const uint64_t bytes = TotalLength(held->second);
    quotas_.Unhold(req.gen());
    auto keep = [&](Status s) REQUIRES(mu_) {
      quotas_.Hold(req.gen(), c.uid, bytes);
      return s;
    };
    MARU_RETURN_IF_ERROR(keep(quotas_.MayReserveAt(req.path(), c.uid, bytes)));
    // A create of no bytes claims the name (first writer wins) ...
    rpc::CreateRequest create;
    create.mutable_ref()->set_path(req.path());
    create.set_mode(req.mode());
    create.set_parents(true);
    create.set_parent_chunk(req.parent_chunk());
    rpc::ChunkReply created;
    Status s = CreateOp(c, create, &created)(txn, session);
    if (!s.ok()) return keep(s);
    // ... the allocation becomes its reservation, and is sealed at once.
    Inode *inode = tree_.Find(created.attr().ino());
    inode->pending->extents = space_.TakeRetired(req.gen(), &txn.batch);
    reserved_bytes_ += TotalLength(inode->pending->extents);
    session->orphan_gens.erase(req.gen());
    UnrefGen(txn, req.gen());  // no longer retired: drops the count only
    rpc::SealRequest seal;
    seal.set_ino(inode->ino);
    seal.set_gen(inode->pending->gen);
    seal.set_size(req.size());
    seal.set_checksum_type(req.checksum_type());
    seal.set_checksum(req.checksum());
    seal.set_keep_lease(true);
    return SealOp(seal, rep)(txn, session);
  });
}

}  // namespace maru
