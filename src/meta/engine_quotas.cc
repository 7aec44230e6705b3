// MetaEngine's quota operations: setting and listing quotas.
// The accounting itself is QuotaTable's; the engine's operations call it
// where a chunk's space or pin changes.
#include "meta/engine_op.h"

namespace maru {

void MetaEngine::SetQuota(const Caller &c, const rpc::SetQuotaRequest &req, rpc::ErrorReply *rep) {
  RunOp(c, req, rep, [&](Txn &txn, Session *) REQUIRES(mu_) -> Status {
    if (!c.is_root()) return Status::Error(EPERM, "quotas are for root to set");
    const QuotaTable::Limit limit{req.bytes(), req.pins()};
    const bool remove = limit.bytes == 0 && limit.pins == 0;
    if (req.by_uid()) {
      quotas_.SetUid(req.uid(), limit);
      if (remove)
        txn.batch.DeleteQuota(true, req.uid());
      else
        txn.batch.PutQuota(QuotaTable::UidRecord(req.uid(), limit));
      return Status::Ok();
    }
    rpc::Ref ref;
    ref.set_path(req.path());
    Result<Inode *> dir = tree_.Resolve(ref, c);
    if (!dir.ok()) return dir.status();
    if (!(*dir)->is_dir()) return Status::Error(ENOTDIR, "a quota is for a directory or a uid");
    quotas_.SetDir((*dir)->ino, limit);
    if (remove)
      txn.batch.DeleteQuota(false, (*dir)->ino);
    else
      txn.batch.PutQuota(QuotaTable::DirRecord((*dir)->ino, limit));
    return Status::Ok();
  });
}

void MetaEngine::ListQuotas(const Caller &c, const rpc::StatsRequest &req, rpc::QuotasReply *rep) {
  RunOp(c, req, rep, [&](Txn &, Session *) REQUIRES(mu_) -> Status {
    quotas_.Fill(rep->mutable_quotas());
    return Status::Ok();
  });
}

}  // namespace maru
