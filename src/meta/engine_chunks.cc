// Chunks: a writer creates a reservation, extends it, and seals it (a new
// version, readable from then on) or aborts it; a reader opens the sealed
// version under a lease and releases it. LookupPrefix opens a chain of
// chunks up to the first miss; Pin keeps a chunk from eviction.
#include <algorithm>

#include "meta/engine_op.h"
#include "meta/meta_engine.h"
#include "meta/pool_scrub.h"
#include "util/clock.h"
#include "util/units.h"

namespace maru {
namespace {

// Cuts `extents` to their first `keep` bytes; returns what was cut off.
ExtentList TrimTo(ExtentList *extents, uint64_t keep) {
  uint64_t offset = 0;
  ExtentList kept, trimmed;
  for (const Extent &e : *extents) {
    if (offset >= keep)
      trimmed.push_back(e);
    else if (offset + e.length > keep) {
      kept.push_back(Extent{e.device, e.offset, keep - offset});
      trimmed.push_back(Extent{e.device, e.offset + keep - offset, e.length - (keep - offset)});
    } else {
      kept.push_back(e);
    }
    offset += e.length;
  }
  *extents = std::move(kept);
  return trimmed;
}

}  // namespace

// Where a create puts its chunk: a path, or (FUSE O_TRUNC) an existing
// file named by its inode, which only a truncating create may name.
Result<NamespaceTree::ParentAndName> MetaEngine::CreateTarget(Txn &txn, const Caller &c,
                                                              const rpc::CreateRequest &req) {
  if (!req.ref().path().empty() || !req.ref().name().empty()) {
    Result<NamespaceTree::ParentAndName> pn =
        tree_.ResolveParent(req.ref(), c, req.parents() ? DirMaker(txn, c) : nullptr);
    if (!pn.ok()) return pn.status().errnum() == EEXIST ? Status::Error(EISDIR) : pn.status();
    if (!MayAccess(*pn->dir, c, kMayWrite | kMayExec)) return Status::Error(EACCES);
    return pn;
  }
  MARU_RETURN_IF_ERROR(MayAddressByIno(req.ref(), c));
  Inode *inode = tree_.Find(req.ref().ino());
  if (!inode) return Status::Error(ESTALE);
  if (!req.truncate()) return Status::Error(EEXIST);
  Inode *dir = tree_.Find(inode->parent);
  if (!dir) return Status::Error(ESTALE);
  return NamespaceTree::ParentAndName{dir, inode->name};
}

// Whether a create may replace what `inode` holds with a new version.
Status MetaEngine::MayRewrite(const Caller &c, const rpc::CreateRequest &req, const Inode &inode) {
  if (inode.is_dir()) return Status::Error(req.truncate() ? EISDIR : EEXIST);
  if (!req.truncate()) return Status::Error(EEXIST);
  if (inode.pending) return Status::Error(EBUSY);
  if (!MayAccess(inode, c, kMayWrite)) return Status::Error(EACCES);
  return Status::Ok();
}

// The chunk a create names as the one it extends; 0 for none.
Result<uint64_t> MetaEngine::ParentChunk(const Caller &c, const std::string &path) {
  if (path.empty()) return uint64_t{0};
  rpc::Ref ref;
  ref.set_path(path);
  Result<Inode *> parent = tree_.Resolve(ref, c);
  if (!parent.ok()) return parent.status();
  if (!(*parent)->is_file()) return Status::Error(EINVAL, "a parent chunk must be a file");
  return (*parent)->ino;
}

Inode *MetaEngine::NewFile(Txn &txn, const Caller &c, const NamespaceTree::ParentAndName &pn,
                           uint32_t mode, int64_t now) {
  auto fresh = std::make_unique<Inode>();
  fresh->ino = NextIno(txn);
  fresh->mode = S_IFREG | (mode & 07777);
  fresh->uid = c.uid;
  fresh->gid = (pn.dir->mode & S_ISGID) ? pn.dir->gid : c.gid;
  fresh->atime_ns = fresh->mtime_ns = fresh->ctime_ns = now;
  Inode *inode = tree_.Adopt(std::move(fresh));
  tree_.Link(pn.dir, inode, pn.name);
  TouchDir(txn, pn.dir);
  return inode;
}

// Makes `extents` the reservation `session` writes into `inode`.
void MetaEngine::Reserve(Txn &txn, Session *session, const Caller &c, const rpc::CreateRequest &req,
                         Inode *inode, ExtentList extents, int64_t now) {
  Version v;
  v.gen = NextGen(txn);
  v.size = req.size();
  v.extents = std::move(extents);
  v.writer_session = session->id;
  v.writer_uid = session->uid;
  v.charged_uid = c.uid;
  v.request_id = req.request_id();
  v.created_ns = now;
  v.parts = static_cast<uint16_t>(req.parts() > 1 ? req.parts() : 0);  // CheckParts: <= 4096
  space_.Ref(v.gen);
  reserved_bytes_ += TotalLength(v.extents);
  session->reservations.insert(inode->ino);
  inode->pending = std::move(v);
  quotas_.Update(*inode);
  txn.Dirty(inode);
}

void MetaEngine::Create(const Caller &c, const rpc::CreateRequest &req, rpc::ChunkReply *rep) {
  RunOp(c, req, rep, CreateOp(c, req, rep));
}

MetaEngine::TxnOp MetaEngine::CreateOp(const Caller &c, const rpc::CreateRequest &req,
                                       rpc::ChunkReply *rep) {
  return [this, &c, &req, rep](Txn &txn, Session *session) REQUIRES(mu_) -> Status {
    Result<NamespaceTree::ParentAndName> pn = CreateTarget(txn, c, req);
    if (!pn.ok()) return pn.status();
    Inode *inode = tree_.Child(*pn->dir, pn->name);
    if (inode) {
      const Boxed<Version> &p = inode->pending;
      if (p && p->writer_session == session->id && req.request_id() &&
          p->request_id == req.request_id()) {
        FillChunk(*inode, *p, p->gen, rep);  // a retry of a create that went through
        return Status::Ok();
      }
      MARU_RETURN_IF_ERROR(MayRewrite(c, req, *inode));
    }
    Result<uint64_t> parent_chunk = ParentChunk(c, req.parent_chunk());
    if (!parent_chunk.ok()) return parent_chunk.status();
    if (inode && *parent_chunk == inode->ino)
      return Status::Error(EINVAL, "a chunk cannot extend itself");
    if (int err = PartTable::CheckParts(req.size(), req.parts()))
      return Status::Error(err, "parts must divide the size (at most 4096 of them)");
    if (int err = CheckReservation(options_.limits, *session))
      return Status::Error(err, "too many reservations in this session");
    MARU_RETURN_IF_ERROR(quotas_.MayReserve(*pn->dir, inode ? inode->uid : c.uid, req.size()));
    ExtentList extents;
    if (req.size() > 0) {
      // The file being rewritten must not be evicted to make room for itself.
      Result<ExtentList> got =
          AllocateForWriter(txn, c, req.size(), inode ? inode->ino : 0, req.contiguous());
      if (!got.ok()) return got.status();
      extents = std::move(*got);
    }
    // Eviction may have taken the parent directory's other entries, never
    // the directory itself; re-check the name in case it was evicted.
    inode = tree_.Child(*pn->dir, pn->name);
    const int64_t now = RealtimeNs();
    if (!inode)
      inode = NewFile(txn, c, *pn, req.mode(), now);
    else
      DropSetIdOnWrite(inode, c);  // a rewrite: write(2), truncate(2)
    if (*parent_chunk) evictor_->SetParent(inode, *parent_chunk);
    Reserve(txn, session, c, req, inode, std::move(extents), now);
    FillChunk(*inode, *inode->pending, inode->pending->gen, rep);
    return Status::Ok();
  };
}

void MetaEngine::Extend(const Caller &c, const rpc::ExtendRequest &req, rpc::ChunkReply *rep) {
  RunOp(c, req, rep,
        [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) REQUIRES(mu_) -> Status {
          Inode *inode = tree_.Find(req.ino());
          if (!inode || !inode->pending || inode->pending->gen != req.gen())
            return Status::Error(session->orphan_gens.count(req.gen()) ? ENOENT : ESTALE);
          Version &v = *inode->pending;
          if (v.writer_session != session->id) return Status::Error(EPERM);
          // Larger than the whole pool is never room to wait for (a full pool is
          // ENOSPC): EFBIG, as a create of that size gets.
          if (req.size() > space_.capacity()) return Status::Error(EFBIG, "larger than the pool");
          uint64_t have = TotalLength(v.extents);
          if (req.size() > have) {
            MARU_RETURN_IF_ERROR(quotas_.MayGrow(*inode, req.size() - have));
            Result<ExtentList> more = AllocateWithEviction(txn, req.size() - have, 0);
            if (!more.ok()) return more.status();
            if (v.extents.size() + more->size() > options_.max_fragments) {
              space_.FreeNow(*more);
              return Status::Error(ENOSPC, "pool too fragmented");
            }
            if (Status s = ScrubForWriter(space_, c, *more); !s.ok()) {
              space_.FreeNow(*more);
              return s;
            }
            reserved_bytes_ += TotalLength(*more);
            v.extents.insert(v.extents.end(), more->begin(), more->end());
            quotas_.Update(*inode);
          }
          v.size = std::max(v.size, req.size());
          txn.Dirty(inode);
          FillChunk(*inode, v, v.gen, rep);
          return Status::Ok();
        });
}

void MetaEngine::Seal(const Caller &c, const rpc::SealRequest &req, rpc::ChunkReply *rep) {
  RunOp(c, req, rep, SealOp(req, rep));
}

MetaEngine::TxnOp MetaEngine::SealOp(const rpc::SealRequest &req, rpc::ChunkReply *rep) {
  return [this, &req, rep](Txn &txn, Session *session) REQUIRES(mu_) -> Status {
    Inode *inode = tree_.Find(req.ino());
    if (!inode || !inode->pending || inode->pending->gen != req.gen()) {
      if (session->orphan_gens.count(req.gen())) {
        if (!req.keep_if_removed()) {
          session->orphan_gens.erase(req.gen());
          UnrefGen(txn, req.gen());
        }
        return Status::Error(ENOENT, "the file was removed while being written");
      }
      return Status::Error(ESTALE);
    }
    if (inode->pending->writer_session != session->id) return Status::Error(EPERM);
    if (req.keep_lease())
      if (int err = CheckLeaseCount(*session))
        return Status::Error(err, "too many leases in this session");
    Version v = std::move(*inode->pending);
    if (req.size() > TotalLength(v.extents)) {
      inode->pending = std::move(v);
      return Status::Error(EINVAL, "sealed size exceeds the reservation");
    }
    inode->pending.reset();
    session->reservations.erase(inode->ino);
    reserved_bytes_ -= TotalLength(v.extents);
    // Give back whole units past the end: nobody else ever saw them (unless
    // a layer-wise reader maps the reservation: then they stay).
    if (!parts_.HasReaders(v.gen))
      space_.FreeNow(
          TrimTo(&v.extents, (req.size() + space_.unit() - 1) / space_.unit() * space_.unit()));
    parts_.Ended(v.gen, PartTable::State::kSealed);
    v.size = req.size();
    v.checksum_type = req.checksum_type();
    v.checksum = req.checksum();
    v.writer_session = 0;
    v.request_id = 0;
    if (inode->current) RetireVersion(txn, *inode->current, inode->ino, false);
    const uint32_t writer = v.charged_uid;
    inode->current = std::move(v);
    quotas_.Update(*inode);
    inode->mtime_ns = inode->ctime_ns = RealtimeNs();
    evictor_->Sealed(*inode);
    bytes_stored_ += req.size();
    uint64_t lease = 0;
    if (req.keep_lease()) {
      lease = leases_.Grant(session->id, inode->ino, inode->current->gen, writer);
      session->leases.insert(lease);
    } else {
      UnrefGen(txn, inode->current->gen);
    }
    txn.Dirty(inode);
    FillChunk(*inode, *inode->current, lease, rep, true);
    evictor_->EvictToLowWatermark(EvictionScope(txn));
    return Status::Ok();
  };
}

void MetaEngine::Abort(const Caller &c, const rpc::HandleRequest &req, rpc::ErrorReply *rep) {
  RunOp(c, req, rep,
        [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) REQUIRES(mu_) -> Status {
          if (session->orphan_gens.erase(req.gen())) {
            UnrefGen(txn, req.gen());
            return Status::Ok();
          }
          Inode *inode = tree_.Find(req.ino());
          if (!inode || !inode->pending || inode->pending->gen != req.gen())
            return Status::Error(ESTALE);
          if (inode->pending->writer_session != session->id) return Status::Error(EPERM);
          DropPending(txn, inode, false);
          return Status::Ok();
        });
}

Status MetaEngine::OpenForRead(const Caller &c, Session *s, Inode *inode, rpc::ChunkReply *rep) {
  if (inode->is_dir()) return Status::Error(EISDIR);
  if (!inode->is_file()) return Status::Error(EINVAL);
  if (!inode->current) return Status::Error(EBUSY, "being written");
  if (!MayAccess(*inode, c, kMayRead)) return Status::Error(EACCES);
  if (int err = CheckLeaseCount(*s)) return Status::Error(err, "too many leases in this session");
  const uint64_t gen = inode->current->gen;
  uint64_t lease = leases_.Grant(s->id, inode->ino, gen, c.uid);
  s->leases.insert(lease);
  space_.Ref(gen);
  ++inode->hits;
  inode->atime_ns = RealtimeNs();
  evictor_->Read(*inode);
  bytes_loaded_ += inode->current->size;
  FillChunk(*inode, *inode->current, lease, rep, true);
  return Status::Ok();
}

void MetaEngine::Open(const Caller &c, const rpc::RefRequest &req, rpc::ChunkReply *rep) {
  RunOp(c, req, rep,
        [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) REQUIRES(mu_) -> Status {
          ++lookups_;
          Result<Inode *> inode = tree_.Resolve(req.ref(), c);
          if (!inode.ok()) return inode.status();
          MARU_RETURN_IF_ERROR(OpenForRead(c, session, *inode, rep));
          ++lookup_hits_;
          return Status::Ok();
        });
}

void MetaEngine::ReleaseLeases(Txn &txn, Session *session,
                               const google::protobuf::RepeatedField<uint64_t> &ids) {
  for (uint64_t id : ids) {
    std::optional<Lease> lease = leases_.Take(id, session->id);
    if (!lease) continue;  // already released, or dropped with an old session
    session->leases.erase(id);
    LeaseEnded(txn, id, *lease);
  }
}

void MetaEngine::Release(const Caller &c, const rpc::ReleaseRequest &req, rpc::ErrorReply *rep) {
  RunOp(c, req, rep, [&](Txn &txn, Session *session) REQUIRES(mu_) -> Status {
    ReleaseLeases(txn, session, req.leases());
    return Status::Ok();
  });
}

void MetaEngine::LookupPrefix(const Caller &c, const rpc::LookupPrefixRequest &req,
                              rpc::LookupPrefixReply *rep) {
  if (int err = CheckKeys(options_.limits, static_cast<size_t>(req.paths_size())))
    return rep->set_error(err);  // before any work: each path would take a lease
  RunOp(c, req, rep,
        [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) REQUIRES(mu_) -> Status {
          lookups_ += req.paths_size();
          for (const std::string &path : req.paths()) {
            rpc::Ref ref;
            ref.set_path(path);
            Result<Inode *> inode = tree_.Resolve(ref, c);
            Status s =
                inode.ok() ? OpenForRead(c, session, *inode, rep->add_hits()) : inode.status();
            if (!s.ok()) {
              if (inode.ok()) rep->mutable_hits()->RemoveLast();
              rep->set_miss_error(s.errnum());
              break;
            }
            ++lookup_hits_;
          }
          return Status::Ok();
        });
}

void MetaEngine::Pin(const Caller &c, const rpc::PinRequest &req, rpc::AttrReply *rep) {
  RunOp(c, req, rep,
        [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) REQUIRES(mu_) -> Status {
          Result<Inode *> found = tree_.Resolve(req.ref(), c);
          if (!found.ok()) return found.status();
          Inode *inode = *found;
          if (!inode->is_file()) return Status::Error(EISDIR);
          if (!IsOwnerOrRoot(*inode, c) && !MayAccess(*inode, c, kMayWrite))
            return Status::Error(EACCES);
          if (req.pin()) MARU_RETURN_IF_ERROR(quotas_.MayPin(*inode));
          if (!inode->pinned && req.pin())
            if (int err = CheckPin(options_.limits, *session))
              return Status::Error(err, "too many pins from this session");
          if (inode->pinned != req.pin()) {
            pins_ += req.pin() ? 1 : -1;
            if (req.pin())
              ++session->pins;
            else if (session->pins > 0)
              --session->pins;
          }
          inode->pinned = req.pin();
          quotas_.Update(*inode);
          inode->pin_expiry_ns =
              req.pin() && req.ttl_ms()
                  ? RealtimeNs() +
                        MsToNs(static_cast<int64_t>(std::min<uint64_t>(req.ttl_ms(), INT64_MAX)))
                  : 0;
          if (inode->pin_expiry_ns)
            next_pin_expiry_ns_ = std::min(next_pin_expiry_ns_, inode->pin_expiry_ns);
          inode->ctime_ns = RealtimeNs();
          txn.Dirty(inode);
          FillAttr(*inode, rep->mutable_attr());
          return Status::Ok();
        });
}

}  // namespace maru
