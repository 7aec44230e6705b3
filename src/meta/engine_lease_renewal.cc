// Which leases a client says it held before a restart are granted again.
//
// The claim (inode, generation) is the client's word, not a record: it is
// honoured only where the caller could get the same lease now, so that a
// claim cannot skip the checks an open makes.
#include "meta/engine_op.h"
#include "meta/meta_engine.h"

namespace maru {

namespace {

// What Open by path would allow: every directory above searchable, the
// file readable (an inode number alone skips the directories).
bool CouldOpen(const NamespaceTree &tree, const Inode &inode, const Caller &c) {
  rpc::Ref ref;
  ref.set_path(tree.PathOf(inode));
  Result<Inode *> found = tree.Resolve(ref, c);
  return found.ok() && *found == &inode && MayAccess(inode, c, kMayRead);
}

}  // namespace

bool MetaEngine::MayRenew(const Caller &c, const rpc::HeldLease &held, bool resumed) {
  const Inode *inode = tree_.Find(held.ino());
  if (inode && !CouldOpen(tree_, *inode, c)) return false;
  if (inode && inode->current && inode->current->gen == held.gen()) return true;
  // A retired version (replaced, or its file gone): only an orphaned
  // session's own uid taking it back may renew one, only as a version of
  // the file it was retired from (recorded with it), and only while that
  // file can still be opened (root: also once it is gone). Generations are
  // counted, not secret: without the file check a claim could name any.
  if (!resumed || !space_.retired().count(held.gen())) return false;
  if (space_.RetiredIno(held.gen()) != held.ino()) return false;
  return inode || c.MayAddressInodes();
}

// Leases held across a restart: renews those whose version still exists.
void MetaEngine::RenewHeldLeases(const Caller &c, const rpc::OpenSessionRequest &req, Session *s,
                                 rpc::OpenSessionReply *rep) {
  for (const rpc::HeldLease &held : req.held()) {
    if (!MayRenew(c, held, rep->resumed())) continue;
    if (CheckLeaseCount(*s)) break;
    uint64_t lease = leases_.Grant(s->id, held.ino(), held.gen(), c.uid);
    s->leases.insert(lease);
    space_.Ref(held.gen());
    if (auto kept = space_.retired().find(held.gen()); kept != space_.retired().end())
      quotas_.HoldRead(held.gen(), c.uid, TotalLength(kept->second));
    ToWire(RenewedLease{held.lease(), lease, held.gen()}, rep->add_renewed());
  }
}

}  // namespace maru
