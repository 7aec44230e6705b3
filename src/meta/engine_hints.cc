// MetaEngine's retention hints: a client says what it expects of
// a chunk's reads (an open conversation will read it again, or none will),
// and the eviction policy may reorder by it. A hint is checked as a pin is
// (the owner, root or a writer of the chunk) but holds nothing: it moves a
// chunk in the eviction order by a bounded amount and never takes it out,
// so it cannot keep space past a quota or stop a full pool from evicting.
// It is soft state in the policy: not written to the database.
#include <vector>

#include "meta/client_limits.h"
#include "meta/engine_op.h"
#include "meta/evictor.h"

namespace maru {

namespace {

Status CheckHinted(const Inode &inode, const Caller &c) {
  if (!inode.is_file()) return Status::Error(EISDIR);
  if (!IsOwnerOrRoot(inode, c) && !MayAccess(inode, c, kMayWrite)) return Status::Error(EACCES);
  // The policy orders sealed chunks only; a writer hints after the seal.
  if (!inode.current) return Status::Error(EBUSY, "not sealed yet");
  return Status::Ok();
}

}  // namespace

void MetaEngine::Hint(const Caller &c, const rpc::HintRequest &req, rpc::ErrorsReply *rep) {
  if (int err = CheckKeys(options_.limits, static_cast<size_t>(req.paths_size())))
    return rep->set_error(err);
  if (req.hint() > kRetentionHintMax) return rep->set_error(EINVAL);
  const auto hint = static_cast<RetentionHint>(req.hint());
  RunOp(c, req, rep, [&](Txn &, Session *) REQUIRES(mu_) -> Status {
    // Reads made through the shared-memory index came before the hint:
    // noted after it, they would undo a drop the client meant to follow them.
    NoteIndexReads();
    const std::vector<bool> repeated = RepeatedPaths(req.paths());
    std::vector<const Inode *> hinted;
    for (int i = 0; i < req.paths_size(); ++i) {
      if (repeated[static_cast<size_t>(i)]) {
        rep->add_errors(EEXIST);
        continue;
      }
      rpc::Ref ref;
      ref.set_path(req.paths(i));
      Result<Inode *> inode = tree_.Resolve(ref, c);
      Status s = inode.ok() ? CheckHinted(**inode, c) : inode.status();
      if (s.ok()) hinted.push_back(*inode);
      rep->add_errors(s.errnum());
    }
    // Last first: a chain named prefix first is dropped from its tail, so
    // each chunk sees whether what extends it was dropped
    // (eviction_frequency.h).
    for (auto it = hinted.rbegin(); it != hinted.rend(); ++it) evictor_->Hint(**it, hint);
    return Status::Ok();
  });
}

}  // namespace maru
