// The namespace: attributes, directories, rename, unlink and statfs.
//
// Every permission check (access.h, quotas) comes before anything moves:
// an operation that fails leaves the tree as it was.
#include <algorithm>

#include "meta/engine_op.h"
#include "meta/meta_engine.h"
#include "util/clock.h"

namespace maru {
namespace {

constexpr uint32_t kReaddirDefault = 1024;
constexpr uint32_t kReaddirMax = 16384;

}  // namespace

Result<Inode *> MetaEngine::MakeDirectory(Txn &txn, Inode *dir, const std::string &name,
                                          uint32_t mode, const Caller &c) {
  if (!MayAccess(*dir, c, kMayWrite | kMayExec)) return Status::Error(EACCES);
  if (tree_.Depth(*dir) >= kMaxDepth)
    return Status::Error(ENAMETOOLONG, "directories nest at most 2047 deep");
  auto inode = std::make_unique<Inode>();
  inode->ino = NextIno(txn);
  inode->mode = S_IFDIR | (mode & 07777);
  inode->uid = c.uid;
  inode->gid = (dir->mode & S_ISGID) ? dir->gid : c.gid;
  if (dir->mode & S_ISGID) inode->mode |= S_ISGID;
  inode->atime_ns = inode->mtime_ns = inode->ctime_ns = RealtimeNs();
  Inode *raw = tree_.Adopt(std::move(inode));
  tree_.Link(dir, raw, name);
  TouchDir(txn, dir);
  txn.Dirty(raw);
  return raw;
}

NamespaceTree::MakeDir MetaEngine::DirMaker(Txn &txn, const Caller &c) {
  return [this, &txn, &c](Inode *dir, const std::string &name)
             REQUIRES(mu_) { return MakeDirectory(txn, dir, name, 0755, c); };
}

void MetaEngine::TouchDir(Txn &txn, Inode *dir) {
  dir->mtime_ns = dir->ctime_ns = RealtimeNs();
  txn.Dirty(dir);
}

void MetaEngine::GetAttr(const Caller &c, const rpc::RefRequest &req, rpc::AttrReply *rep) {
  RunOp(c, req, rep,
        [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) REQUIRES(mu_) -> Status {
          Result<Inode *> found = tree_.Resolve(req.ref(), c);
          if (!found.ok()) return found.status();
          const Inode &inode = **found;
          if (req.access() && !MayAccess(inode, c, static_cast<int>(req.access() & 7)))
            return Status::Error(EACCES);
          FillAttr(inode, rep->mutable_attr());
          // A session id is shown only to its owner and root: it names the session.
          if (inode.pending && c.MayActFor(inode.pending->writer_uid))
            rep->mutable_attr()->set_writer_session(inode.pending->writer_session);
          if (req.with_extents()) {
            if (inode.current) ToWireExtents(inode.current->extents, rep->mutable_extents());
            if (const Inode *parent = inode.parent_chunk ? tree_.Find(inode.parent_chunk) : nullptr)
              rep->set_parent_path(tree_.PathOf(*parent));
          }
          return Status::Ok();
        });
}

void MetaEngine::Mkdir(const Caller &c, const rpc::MkdirRequest &req, rpc::AttrReply *rep) {
  RunOp(c, req, rep,
        [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) REQUIRES(mu_) -> Status {
          Result<NamespaceTree::ParentAndName> pn =
              tree_.ResolveParent(req.ref(), c, req.parents() ? DirMaker(txn, c) : nullptr);
          if (!pn.ok()) {
            if (pn.status().errnum() == EEXIST && req.parents()) {
              FillAttr(*tree_.root(), rep->mutable_attr());
              return Status::Ok();
            }
            return pn.status();
          }
          if (Inode *existing = tree_.Child(*pn->dir, pn->name)) {
            if (req.parents() && existing->is_dir()) {
              FillAttr(*existing, rep->mutable_attr());
              return Status::Ok();
            }
            return Status::Error(EEXIST);
          }
          Result<Inode *> dir = MakeDirectory(txn, pn->dir, pn->name, req.mode(), c);
          if (!dir.ok()) return dir.status();
          FillAttr(**dir, rep->mutable_attr());
          return Status::Ok();
        });
}

Status MetaEngine::RemoveEntry(Txn &txn, const Caller &c, const rpc::Ref &ref, bool dir) {
  Result<NamespaceTree::ParentAndName> pn = tree_.ResolveParent(ref, c);
  if (!pn.ok())
    return pn.status().errnum() == EEXIST ? Status::Error(dir ? EBUSY : EISDIR) : pn.status();
  Inode *victim = tree_.Child(*pn->dir, pn->name);
  if (!victim) return Status::Error(ENOENT);
  if (dir && !victim->is_dir()) return Status::Error(ENOTDIR);
  if (!dir && victim->is_dir()) return Status::Error(EISDIR);
  if (!MayAccess(*pn->dir, c, kMayWrite | kMayExec)) return Status::Error(EACCES);
  if (!StickyAllows(*pn->dir, *victim, c)) return Status::Error(EPERM);
  if (dir && !victim->children.empty()) return Status::Error(ENOTEMPTY);
  RemoveTree(txn, victim);
  TouchDir(txn, pn->dir);
  return Status::Ok();
}

void MetaEngine::Rmdir(const Caller &c, const rpc::RefRequest &req, rpc::ErrorReply *rep) {
  RunOp(c, req, rep,
        [&](Txn &txn, Session *) REQUIRES(mu_) { return RemoveEntry(txn, c, req.ref(), true); });
}

void MetaEngine::Unlink(const Caller &c, const rpc::RefRequest &req, rpc::ErrorReply *rep) {
  RunOp(c, req, rep,
        [&](Txn &txn, Session *) REQUIRES(mu_) { return RemoveEntry(txn, c, req.ref(), false); });
}

// Whether `c` may rename `src` as `req` asks (`dst`: what the target
// names now); every refusal comes before anything moves.
Status MetaEngine::MayRename(const Caller &c, const rpc::RenameRequest &req,
                             const NamespaceTree::ParentAndName &from,
                             const NamespaceTree::ParentAndName &to, const Inode &src,
                             const Inode *dst) const {
  if (!MayAccess(*from.dir, c, kMayWrite | kMayExec) ||
      !MayAccess(*to.dir, c, kMayWrite | kMayExec))
    return Status::Error(EACCES);
  if (!StickyAllows(*from.dir, src, c)) return Status::Error(EPERM);
  if (src.is_dir() && tree_.IsAncestor(src, *to.dir)) return Status::Error(EINVAL);
  if (dst == &src) return Status::Ok();  // nothing to do
  if (dst) {
    if (req.noreplace()) return Status::Error(EEXIST);
    if (!StickyAllows(*to.dir, *dst, c)) return Status::Error(EPERM);
  }
  if (req.exchange()) {
    if (!dst) return Status::Error(ENOENT);
    if (dst->is_dir() && tree_.IsAncestor(*dst, *from.dir)) return Status::Error(EINVAL);
  } else if (dst) {
    if (src.is_dir() && !dst->is_dir()) return Status::Error(ENOTDIR);
    if (!src.is_dir() && dst->is_dir()) return Status::Error(EISDIR);
    if (dst->is_dir() && !dst->children.empty()) return Status::Error(ENOTEMPTY);
  }
  if (!FitsDepth(src, *to.dir) || (req.exchange() && !FitsDepth(*dst, *from.dir)))
    return Status::Error(ENAMETOOLONG, "directories nest at most 2047 deep");
  return quotas_.MayMove(src, *from.dir, *to.dir, dst, req.exchange());
}

void MetaEngine::Rename(const Caller &c, const rpc::RenameRequest &req, rpc::ErrorReply *rep) {
  RunOp(c, req, rep, [&](Txn &txn, Session *) REQUIRES(mu_) -> Status {
    Result<NamespaceTree::ParentAndName> from = tree_.ResolveParent(req.from(), c);
    if (!from.ok()) return from.status().errnum() == EEXIST ? Status::Error(EBUSY) : from.status();
    Result<NamespaceTree::ParentAndName> to = tree_.ResolveParent(req.to(), c);
    if (!to.ok()) return to.status().errnum() == EEXIST ? Status::Error(EBUSY) : to.status();
    Inode *src = tree_.Child(*from->dir, from->name);
    if (!src) return Status::Error(ENOENT);
    Inode *dst = tree_.Child(*to->dir, to->name);
    MARU_RETURN_IF_ERROR(MayRename(c, req, *from, *to, *src, dst));
    if (dst == src) return Status::Ok();
    if (req.exchange()) {
      tree_.Unlink(src);
      tree_.Unlink(dst);
      tree_.Link(to->dir, src, to->name);
      tree_.Link(from->dir, dst, from->name);
      src->ctime_ns = dst->ctime_ns = RealtimeNs();
      txn.Dirty(src);
      txn.Dirty(dst);
    } else {
      if (dst) RemoveTree(txn, dst);
      tree_.Unlink(src);
      tree_.Link(to->dir, src, to->name);
      src->ctime_ns = RealtimeNs();
      txn.Dirty(src);
    }
    quotas_.Moved(*src, req.exchange() ? dst : nullptr);
    TouchDir(txn, from->dir);
    TouchDir(txn, to->dir);
    return Status::Ok();
  });
}

bool MetaEngine::FitsDepth(const Inode &moved, const Inode &into) const {
  if (!moved.is_dir()) return true;
  return tree_.Depth(into) + 1 + tree_.Height(moved) <= kMaxDepth;
}

void MetaEngine::Readdir(const Caller &c, const rpc::ReaddirRequest &req, rpc::ReaddirReply *rep) {
  RunOp(c, req, rep,
        [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) REQUIRES(mu_) -> Status {
          Result<Inode *> dir = tree_.Resolve(req.ref(), c);
          if (!dir.ok()) return dir.status();
          if (!(*dir)->is_dir()) return Status::Error(ENOTDIR);
          if (!MayAccess(**dir, c, kMayRead)) return Status::Error(EACCES);
          FillAttr(**dir, rep->mutable_dir());
          uint32_t max = req.max() ? std::min(req.max(), kReaddirMax) : kReaddirDefault;
          auto it = req.after().empty() ? (*dir)->children.begin()
                                        : (*dir)->children.upper_bound(req.after());
          for (; it != (*dir)->children.end() && max > 0; ++it, --max) {
            const Inode *child = tree_.Find(it->second);
            if (!child) continue;
            rpc::DirEntry *e = rep->add_entries();
            e->set_name(std::string(it->first));
            FillAttr(*child, e->mutable_attr());
          }
          rep->set_eof(it == (*dir)->children.end());
          return Status::Ok();
        });
}

// Whether `c` may change what `req` asks of `inode` (its parent chunk aside).
Status MetaEngine::MaySetAttr(const Caller &c, const rpc::SetAttrRequest &req, const Inode &inode) {
  const bool owner = IsOwnerOrRoot(inode, c);
  if ((req.set_mode() || (req.set_atime() && req.atime_ns() != -1) ||
       (req.set_mtime() && req.mtime_ns() != -1)) &&
      !owner)
    return Status::Error(EPERM);
  if (((req.set_atime() && req.atime_ns() == -1) || (req.set_mtime() && req.mtime_ns() == -1)) &&
      !owner && !MayAccess(inode, c, kMayWrite))
    return Status::Error(EACCES);
  if (req.set_uid() && req.uid() != inode.uid && !c.is_root()) return Status::Error(EPERM);
  if (req.set_gid() && req.gid() != inode.gid && !(c.is_root() || (owner && c.InGroup(req.gid()))))
    return Status::Error(EPERM);
  return Status::Ok();
}

// The parent chunk `req` sets on `inode` (0: none), or what it had.
Result<uint64_t> MetaEngine::NewParentChunk(const Caller &c, const rpc::SetAttrRequest &req,
                                            const Inode &inode) {
  if (!req.set_parent()) return inode.parent_chunk;
  if (!IsOwnerOrRoot(inode, c) && !MayAccess(inode, c, kMayWrite)) return Status::Error(EACCES);
  if (req.parent_path().empty()) return uint64_t{0};
  rpc::Ref ref;
  ref.set_path(req.parent_path());
  Result<Inode *> parent = tree_.Resolve(ref, c);
  if (!parent.ok()) return parent.status();
  if (!(*parent)->is_file() || *parent == &inode) return Status::Error(EINVAL);
  return (*parent)->ino;
}

void MetaEngine::SetAttr(const Caller &c, const rpc::SetAttrRequest &req, rpc::AttrReply *rep) {
  RunOp(c, req, rep, [&](Txn &txn, Session *) REQUIRES(mu_) -> Status {
    Result<Inode *> found = tree_.Resolve(req.ref(), c);
    if (!found.ok()) return found.status();
    Inode *inode = *found;
    MARU_RETURN_IF_ERROR(MaySetAttr(c, req, *inode));
    Result<uint64_t> parent_chunk = NewParentChunk(c, req, *inode);
    if (!parent_chunk.ok()) return parent_chunk.status();
    const int64_t now = RealtimeNs();
    if (req.set_mode()) {
      inode->mode = (inode->mode & S_IFMT) | (req.mode() & 07777);
      if (!c.is_root() && !c.InGroup(inode->gid)) inode->mode &= ~S_ISGID;
    }
    if (req.set_uid()) inode->uid = req.uid();
    if (req.set_uid() && inode->is_file()) quotas_.Update(*inode);
    if (req.set_gid()) inode->gid = req.gid();
    if ((req.set_uid() || req.set_gid()) && !inode->is_dir()) inode->mode &= ~(S_ISUID | S_ISGID);
    if (req.set_atime()) inode->atime_ns = req.atime_ns() == -1 ? now : req.atime_ns();
    if (req.set_mtime()) inode->mtime_ns = req.mtime_ns() == -1 ? now : req.mtime_ns();
    evictor_->SetParent(inode, *parent_chunk);
    inode->ctime_ns = now;
    txn.Dirty(inode);
    FillAttr(*inode, rep->mutable_attr());
    return Status::Ok();
  });
}

void MetaEngine::Statfs(const Caller &c, const rpc::StatfsRequest &req, rpc::StatfsReply *rep) {
  RunOp(c, req, rep,
        [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) REQUIRES(mu_) -> Status {
          rep->set_total(space_.capacity());
          rep->set_free(space_.free_bytes());
          rep->set_files(tree_.size());
          rep->set_unit(space_.unit());
          rep->set_reserved(reserved_bytes_);
          rep->set_deferred(space_.retired_bytes());
          for (const SpaceManager::Device &d : space_.devices()) FillDevice(d, rep->add_devices());
          return Status::Ok();
        });
}

}  // namespace maru
