#include "meta/meta_engine.h"

#include <sys/random.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <set>

#include "alloc/pool_device.h"
#include "grant_mac.h"
#include "meta/engine_op.h"
#include "meta/pool_identity.h"
#include "meta/pool_scrub.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/path.h"
#include "util/units.h"

namespace maru {
namespace {

constexpr uint64_t kCounterStep = 1 << 16;
constexpr uint32_t kReaddirDefault = 1024;
constexpr uint32_t kReaddirMax = 16384;
constexpr size_t kMaxInstanceName = 64;

// An instance name is shown by tools and in metric labels: printable only.
int CheckInstanceName(const std::string &name) {
  if (name.size() > kMaxInstanceName) return ENAMETOOLONG;
  for (unsigned char ch : name)
    if (ch < 0x20 || ch == 0x7f) return EINVAL;
  return 0;
}

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

uint64_t RandomSessionId() {
  uint64_t id = 0;
  while (id == 0) {
    if (getrandom(&id, sizeof(id), 0) != sizeof(id)) id = static_cast<uint64_t>(MonotonicNs());
  }
  return id;
}

}  // namespace

MetaEngine::MetaEngine(const EngineOptions &options)
    : options_(options), grant_key_(NewGrantKey()) {
  space_.set_on_free([this](uint64_t gen) { quotas_.DropReads(gen); });
}
MetaEngine::~MetaEngine() = default;

Result<std::unique_ptr<MetaEngine>> MetaEngine::Open(const EngineOptions &options) {
  if (options.pool_paths.empty()) return Status::Error(EINVAL, "no pool device given (--pool)");
  if (options.low_watermark > options.high_watermark || options.high_watermark > 1.0 ||
      options.low_watermark <= 0)
    return Status::Error(EINVAL, "watermarks must satisfy 0 < low <= high <= 1");
  std::unique_ptr<MetaEngine> engine(new MetaEngine(options));
  Result<std::unique_ptr<Evictor>> evictor =
      Evictor::Make(options.eviction, {options.high_watermark, options.low_watermark},
                    &engine->tree_, &engine->space_);
  if (!evictor.ok()) return evictor.status();
  engine->evictor_ = std::move(*evictor);
  MARU_RETURN_IF_ERROR(engine->Load());
  return engine;
}

uint64_t MetaEngine::NextIno(Txn &txn) {
  if (next_ino_ >= ino_limit_ || ino_limit_ == 0) {
    ino_limit_ = next_ino_ + kCounterStep;
    schema::Counters c;
    c.set_ino_limit(ino_limit_);
    c.set_gen_limit(std::max(gen_limit_, next_gen_));
    txn.batch.PutCounters(c);
  }
  return next_ino_++;
}

uint64_t MetaEngine::NextGen(Txn &txn) {
  if (next_gen_ >= gen_limit_ || gen_limit_ == 0) {
    gen_limit_ = next_gen_ + kCounterStep;
    schema::Counters c;
    c.set_ino_limit(std::max(ino_limit_, next_ino_));
    c.set_gen_limit(gen_limit_);
    txn.batch.PutCounters(c);
  }
  return next_gen_++;
}

// --- Helpers ------------------------------------------------------------------

Result<Session *> MetaEngine::LiveSession(const Caller &c, uint64_t id) {
  Session *s = sessions_.Find(id);
  if (!s || s->orphaned) return Status::Error(ENOTCONN);
  // Checked before it counts as seen: another uid must not keep it alive.
  if (!c.MayActFor(s->uid)) return Status::Error(EPERM, "another uid's session");
  s->last_seen_ns = MonotonicNs();
  return s;
}

void MetaEngine::FillAttr(const Inode &inode, rpc::Attr *a) const {
  a->set_ino(inode.ino);
  a->set_parent(inode.parent ? inode.parent : inode.ino);
  a->set_mode(inode.mode);
  a->set_uid(inode.uid);
  a->set_gid(inode.gid);
  a->set_atime_ns(inode.atime_ns);
  a->set_mtime_ns(inode.mtime_ns);
  a->set_ctime_ns(inode.ctime_ns);
  a->set_hits(inode.hits);
  a->set_pinned(inode.pinned);
  a->set_pin_expiry_ns(inode.pin_expiry_ns);
  a->set_parent_chunk(inode.parent_chunk);
  if (inode.is_dir()) {
    a->set_state(rpc::DIRECTORY);
    a->set_nlink(2 + inode.subdirs);
    a->set_size(4096);
    return;
  }
  a->set_nlink(1);
  const Version *v = inode.current ? &*inode.current : inode.pending ? &*inode.pending : nullptr;
  a->set_state(inode.current ? rpc::SEALED : rpc::WRITING);
  if (!v) return;
  a->set_gen(v->gen);
  // Until sealed, nobody but its writer knows how much of it is written.
  a->set_size(inode.current ? v->size : 0);
  a->set_allocated(TotalLength(v->extents));
  a->set_checksum_type(v->checksum_type);
  a->set_checksum(v->checksum);
  a->set_leases(inode.current ? space_.refs(inode.current->gen) : 0);
}

void MetaEngine::FillDevice(const SpaceManager::Device &d, rpc::Device *dev) const {
  dev->set_index(d.index);
  dev->set_path(d.path);
  dev->set_size(d.allocator.capacity());
  dev->set_used(d.allocator.capacity() - d.allocator.free_bytes());
  dev->set_unit(d.allocator.unit());
  dev->set_epoch(d.superblock.epoch);
  dev->set_device_uuid(UuidBytes(d.superblock.device_uuid));
  if (auto it = agents_.find(d.index); it != agents_.end()) dev->set_agent(it->second.address);
}

void MetaEngine::FillChunk(const Inode &inode, const Version &v, uint64_t lease,
                           rpc::ChunkReply *rep, bool slim) const {
  rpc::Attr *a = rep->mutable_attr();
  if (slim) {
    a->set_ino(inode.ino);
    a->set_state(inode.current ? rpc::SEALED : rpc::WRITING);
    a->set_checksum_type(v.checksum_type);
    a->set_checksum(v.checksum);
  } else {
    FillAttr(inode, a);
    a->set_allocated(TotalLength(v.extents));
  }
  // A writer's reply describes its reservation, not the sealed version.
  a->set_gen(v.gen);
  a->set_size(v.size);
  ToWireExtents(v.extents, rep->mutable_extents());
  rep->set_lease(lease);
  if (v.parts > 1) rep->set_parts(v.parts);
}

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
  return [this, &txn, &c](Inode *dir, const std::string &name) {
    return MakeDirectory(txn, dir, name, 0755, c);
  };
}

void MetaEngine::TouchDir(Txn &txn, Inode *dir) {
  dir->mtime_ns = dir->ctime_ns = RealtimeNs();
  txn.Dirty(dir);
}

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

void MetaEngine::ExpireSession(Txn &txn, uint64_t id) {
  Session *s = sessions_.Find(id);
  if (!s) return;
  for (uint64_t lease_id : s->leases)
    if (std::optional<Lease> lease = leases_.Take(lease_id, id)) LeaseEnded(txn, lease_id, *lease);
  for (uint64_t ino : std::vector<uint64_t>(s->reservations.begin(), s->reservations.end())) {
    Inode *inode = tree_.Find(ino);
    if (inode && inode->pending && inode->pending->writer_session == id)
      DropPending(txn, inode, false);
  }
  for (uint64_t gen : s->orphan_gens) UnrefGen(txn, gen);
  std::erase_if(agents_, [&](const auto &a) { return a.second.session == id; });
  if (index_) {
    index_->DropRegion(id);  // its lease slots end with it: what they held may go
    space_.Tick(MonotonicNs(), &txn.batch);
  }
  sessions_.Remove(id);
}

Evictor::Scope MetaEngine::EvictionScope(Txn &txn) {
  NoteIndexReads();  // the order the evictor reads includes reads without messages
  return Evictor::Scope{[this, &txn](Inode *inode) { RemoveFile(txn, inode); }, &txn.batch};
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

// --- Sessions -----------------------------------------------------------------

void MetaEngine::OpenSession(const Caller &c, const rpc::OpenSessionRequest &req,
                             rpc::OpenSessionReply *rep) {
  if (int err = CheckSessionStrings(options_.limits, req)) return rep->set_error(err);
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = req.resume();
  if (int err = CheckInstanceName(req.instance())) return rep->set_error(err);
  Session *s = id ? sessions_.Find(id) : nullptr;
  // Only a session waiting for its client (orphaned by a restart) may be
  // taken back, and only by its uid. A live one is someone's: taking it
  // would revoke leases its client still trusts. (A client whose resume
  // reply was lost gets a new session; the old one times out.)
  // Any other id is the server's to choose: a client that could pick one
  // could take an id another uid will be told to resume.
  if (s && (s->uid != c.uid || !s->orphaned)) s = nullptr;
  // Every session costs the server memory and every lease it may take:
  // one uid other than root holds a bounded number (root's are maru-fuse's
  // and the agents').
  const uint32_t max = options_.limits.sessions_per_uid;
  if (!s && c.uid != 0 && max && sessions_.CountOf(c.uid) >= max) return rep->set_error(EMFILE);
  Txn txn(this);
  if (!s) {
    do id = RandomSessionId();
    while (sessions_.Find(id));
    s = sessions_.Create(id, c.uid);
    s->since_ns = RealtimeNs();
  } else {
    rep->set_resumed(true);
  }
  s->orphaned = false;
  s->client = req.client();
  s->hostname = req.hostname();
  s->instance = req.instance();
  s->pid = req.pid() ? req.pid() : c.pid;
  s->last_seen_ns = MonotonicNs();
  RenewHeldLeases(c, req, s, rep);
  txn.Commit();
  rep->set_session(id);
  rep->set_heartbeat_ms(options_.heartbeat_ms);
  rep->set_timeout_ms(static_cast<uint32_t>(options_.session_timeout_ms));
  rep->set_pool_uuid(pool_uuid_);
  rep->set_fast_lane(options_.fast_lane);
  AssignIndexRegion(c, s, rep);
  for (const SpaceManager::Device &d : space_.devices()) FillDevice(d, rep->add_devices());
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

void MetaEngine::Heartbeat(const Caller &c, const rpc::HeartbeatRequest &req,
                           rpc::HeartbeatReply *rep) {
  std::lock_guard<std::mutex> lock(mu_);
  Result<Session *> found = LiveSession(c, req.header().session());
  if (!found.ok()) return rep->set_error(found.status().errnum());
  Session *s = *found;
  if (req.header().release_size()) {
    Txn txn(this);
    ReleaseLeases(txn, s, req.header().release());
    txn.Commit();
  }
  rep->set_leases(static_cast<uint32_t>(s->leases.size()));
}

void MetaEngine::CloseSession(const Caller &c, const rpc::HeartbeatRequest &req,
                              rpc::ErrorReply *rep) {
  std::lock_guard<std::mutex> lock(mu_);
  Result<Session *> found = LiveSession(c, req.header().session());
  if (!found.ok()) return rep->set_error(found.status().errnum());
  Txn txn(this);
  ExpireSession(txn, req.header().session());
  rep->set_error(txn.Commit().errnum());
}

// --- Namespace ----------------------------------------------------------------

void MetaEngine::GetAttr(const Caller &c, const rpc::RefRequest &req, rpc::AttrReply *rep) {
  RunOp(c, req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
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
  RunOp(c, req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
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
  RunOp(c, req, rep, [&](Txn &txn, Session *) { return RemoveEntry(txn, c, req.ref(), true); });
}

void MetaEngine::Unlink(const Caller &c, const rpc::RefRequest &req, rpc::ErrorReply *rep) {
  RunOp(c, req, rep, [&](Txn &txn, Session *) { return RemoveEntry(txn, c, req.ref(), false); });
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
  RunOp(c, req, rep, [&](Txn &txn, Session *) -> Status {
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
  RunOp(c, req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    Result<Inode *> dir = tree_.Resolve(req.ref(), c);
    if (!dir.ok()) return dir.status();
    if (!(*dir)->is_dir()) return Status::Error(ENOTDIR);
    if (!MayAccess(**dir, c, kMayRead)) return Status::Error(EACCES);
    FillAttr(**dir, rep->mutable_dir());
    uint32_t max = req.max() ? std::min(req.max(), kReaddirMax) : kReaddirDefault;
    auto it =
        req.after().empty() ? (*dir)->children.begin() : (*dir)->children.upper_bound(req.after());
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
  RunOp(c, req, rep, [&](Txn &txn, Session *) -> Status {
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
  RunOp(c, req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
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

// --- Chunks -------------------------------------------------------------------

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
  return [this, &c, &req, rep](Txn &txn, Session *session) -> Status {
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
      Result<ExtentList> got = AllocateWithEviction(txn, req.size(), inode ? inode->ino : 0);
      if (!got.ok()) return got.status();
      if (req.contiguous() && got->size() > 1) {
        space_.FreeNow(*got);
        return Status::Error(ENOSPC, "no free run holds it in one extent");
      }
      if (Status s = ScrubForWriter(space_, c, *got); !s.ok()) {
        space_.FreeNow(*got);
        return s;
      }
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
  RunOp(c, req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
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
  return [this, &req, rep](Txn &txn, Session *session) -> Status {
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
  RunOp(c, req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    if (session->orphan_gens.erase(req.gen())) {
      UnrefGen(txn, req.gen());
      return Status::Ok();
    }
    Inode *inode = tree_.Find(req.ino());
    if (!inode || !inode->pending || inode->pending->gen != req.gen()) return Status::Error(ESTALE);
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
  RunOp(c, req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
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
  RunOp(c, req, rep, [&](Txn &txn, Session *session) -> Status {
    ReleaseLeases(txn, session, req.leases());
    return Status::Ok();
  });
}

void MetaEngine::LookupPrefix(const Caller &c, const rpc::LookupPrefixRequest &req,
                              rpc::LookupPrefixReply *rep) {
  if (int err = CheckKeys(options_.limits, static_cast<size_t>(req.paths_size())))
    return rep->set_error(err);  // before any work: each path would take a lease
  RunOp(c, req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    lookups_ += req.paths_size();
    for (const std::string &path : req.paths()) {
      rpc::Ref ref;
      ref.set_path(path);
      Result<Inode *> inode = tree_.Resolve(ref, c);
      Status s = inode.ok() ? OpenForRead(c, session, *inode, rep->add_hits()) : inode.status();
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

// --- Lifecycle and administration ---------------------------------------------

void MetaEngine::Pin(const Caller &c, const rpc::PinRequest &req, rpc::AttrReply *rep) {
  RunOp(c, req, rep, [&]([[maybe_unused]] Txn &txn, [[maybe_unused]] Session *session) -> Status {
    Result<Inode *> found = tree_.Resolve(req.ref(), c);
    if (!found.ok()) return found.status();
    Inode *inode = *found;
    if (!inode->is_file()) return Status::Error(EISDIR);
    if (!IsOwnerOrRoot(*inode, c) && !MayAccess(*inode, c, kMayWrite)) return Status::Error(EACCES);
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

void MetaEngine::RegisterAgent(const Caller &c, const rpc::RegisterAgentRequest &req,
                               rpc::RegisterAgentReply *rep) {
  RunOp(c, req, rep, [&](Txn &, Session *session) -> Status {
    if (!c.is_root()) return Status::Error(EPERM, "agents run as root");
    if (req.address().empty()) return Status::Error(EINVAL, "an agent needs an address");
    if (grant_key_.empty()) return Status::Error(EIO, "no grant key (no randomness at start)");
    for (const std::string &uuid : req.device_uuids()) {
      const SpaceManager::Device *found = nullptr;
      for (const SpaceManager::Device &d : space_.devices())
        if (UuidBytes(d.superblock.device_uuid) == uuid) found = &d;
      if (!found) return Status::Error(ENODEV, "not a device of this pool");
      agents_[found->index] = AgentInfo{req.address(), session->id};
    }
    rep->set_grant_key(grant_key_);
    return Status::Ok();
  });
}

// The extents behind the first `published` parts of a version being
// written: what a layer-wise reader may be granted.
ExtentList MetaEngine::PublishedExtents(const Version &v) {
  const uint32_t parts = std::max<uint32_t>(v.parts, 1);
  uint64_t left = v.published >= parts ? v.size : v.size / parts * v.published;
  ExtentList out;
  for (const Extent &e : v.extents) {
    if (left == 0) break;
    const uint64_t n = std::min(left, e.length);
    out.push_back({e.device, e.offset, n});
    left -= n;
  }
  return out;
}

Status MetaEngine::HoldsExtents(const Session &client, uint32_t device,
                                const google::protobuf::RepeatedPtrField<rpc::Extent> &extents,
                                bool writable) {
  // Every extent asked for must lie inside a version the client holds: a
  // lease on it, or its own reservation. Only a reservation is writable.
  std::vector<const ExtentList *> held, reserved;
  std::deque<ExtentList> published;  // owns the lists of layer-wise readers' leases
  for (uint64_t lease_id : client.leases) {
    const Lease *lease = leases_.Find(lease_id);
    const Inode *inode = lease ? tree_.Find(lease->ino) : nullptr;
    if (inode && inode->current && inode->current->gen == lease->gen) {
      held.push_back(&inode->current->extents);
    } else if (inode && inode->pending && inode->pending->gen == lease->gen) {
      // A layer-wise reader's (OpenPartial): only the parts published so
      // far, never the bytes the writer has not written yet.
      published.push_back(PublishedExtents(*inode->pending));
      held.push_back(&published.back());
    } else if (lease && space_.retired().count(lease->gen))
      held.push_back(&space_.retired().at(lease->gen));
  }
  for (uint64_t ino : client.reservations)
    if (const Inode *inode = tree_.Find(ino); inode && inode->pending)
      reserved.push_back(&inode->pending->extents);
  // Its allocations under no name (Alloc, until Publish) and its writes
  // whose file was removed: still its own, unsealed, so writable.
  for (uint64_t gen : client.orphan_gens)
    if (auto it = space_.retired().find(gen); it != space_.retired().end())
      reserved.push_back(&it->second);
  if (extents.empty()) return Status::Error(EINVAL, "no extents to check");
  auto covers = [&](const std::vector<const ExtentList *> &lists, const rpc::Extent &want) {
    for (const ExtentList *list : lists)
      for (const Extent &e : *list)
        if (e.device == device && e.device == want.device() && want.offset() >= e.offset &&
            want.offset() < e.end() && want.length() <= e.end() - want.offset())
          return true;
    return false;
  };
  for (const rpc::Extent &want : extents) {
    if (covers(reserved, want)) continue;
    // Not (or no longer) held: for a reader, its lease is gone.
    if (!covers(held, want))
      return Status::Error(ESTALE, "extent not leased or reserved by that session");
    if (writable) return Status::Error(EACCES, "a lease grants reading only");
  }
  return Status::Ok();
}

void MetaEngine::CheckExtents(const Caller &c, const rpc::CheckExtentsRequest &req,
                              rpc::ErrorReply *rep) {
  RunOp(c, req, rep, [&](Txn &, Session *) -> Status {
    // The session and uid come from a grant the agent verified (a MAC the
    // server made): the session must still be that uid's.
    if (!c.is_root()) return Status::Error(EPERM, "only agents check extents");
    Session *client = sessions_.Find(req.client_session());
    if (!client || client->orphaned || client->uid != req.client_uid())
      return Status::Error(ESTALE, "no such session of that uid");
    return HoldsExtents(*client, req.device(), req.extents(), req.writable());
  });
}

void MetaEngine::IssueGrant(const Caller &c, const rpc::IssueGrantRequest &req,
                            rpc::GrantReply *rep) {
  RunOp(c, req, rep, [&](Txn &, Session *session) -> Status {
    // A grant speaks for its session: only that session's own uid gets one.
    if (session->uid != c.uid && !c.is_root())
      return Status::Error(EPERM, "grants go to the session's own uid");
    if (req.extents_size() > 256) return Status::Error(E2BIG, "at most 256 extents per grant");
    MARU_RETURN_IF_ERROR(HoldsExtents(*session, req.device(), req.extents(), req.writable()));
    const uint32_t ttl =
        req.ttl_ms() == 0 ? kMaxGrantTtlMs : std::min(req.ttl_ms(), kMaxGrantTtlMs);
    rpc::Grant *g = rep->mutable_grant();
    g->set_session(session->id);
    g->set_uid(session->uid);
    g->set_device(req.device());
    *g->mutable_extents() = req.extents();
    g->set_writable(req.writable());
    g->set_serial(++grant_serial_);
    g->set_expires_ms(RealtimeNs() / 1000000 + ttl);
    g->set_mac(GrantMac(grant_key_, *g));
    return Status::Ok();
  });
}

void MetaEngine::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(this);
  const int64_t mono = MonotonicNs();
  for (uint64_t id : sessions_.Expired(mono, options_.session_timeout_ms * 1000000)) {
    const Session *s = sessions_.Find(id);
    LOG_INFO("session %016lx (%s, pid %u) %s: releasing %zu leases and %zu reservations", id,
             s->client.c_str(), s->pid, s->orphaned ? "did not come back" : "timed out",
             s->leases.size(), s->reservations.size());
    ExpireSession(txn, id);
  }
  NoteIndexReads();
  if (index_) space_.Tick(mono, &txn.batch);  // slot leases end without a message
  const int64_t now = RealtimeNs();
  if (now >= next_pin_expiry_ns_) {  // else no pin can have expired: no walk
    int64_t next = INT64_MAX;
    tree_.ForEach([&](const Inode &cinode) {
      if (!cinode.pinned || !cinode.pin_expiry_ns) return;
      if (cinode.pin_expiry_ns > now) {
        next = std::min(next, cinode.pin_expiry_ns);
        return;
      }
      Inode &inode = const_cast<Inode &>(cinode);
      inode.pinned = false;
      inode.pin_expiry_ns = 0;
      --pins_;
      quotas_.Update(inode);
      txn.Dirty(&inode);
    });
    next_pin_expiry_ns_ = next;
  }
  evictor_->EvictToLowWatermark(EvictionScope(txn));
  txn.Commit();
}

// --- Batched and lease-free operations (issue #13) ---

namespace {

// Distinct instance names Stats reports; the rest are "(other)". Metrics
// label by them, and a label must not take unbounded values.
constexpr size_t kMaxInstanceLabels = 32;

}  // namespace

std::vector<bool> RepeatedPaths(const google::protobuf::RepeatedPtrField<std::string> &paths) {
  std::unordered_set<std::string_view> seen;
  std::vector<bool> repeated;
  repeated.reserve(static_cast<size_t>(paths.size()));
  for (const std::string &p : paths) repeated.push_back(!seen.insert(p).second);
  return repeated;
}

void MetaEngine::FillSessionsByInstance(rpc::StatsReply *rep) const {
  std::map<std::string, uint64_t> counts;
  sessions_.ForEach([&](const Session &s) { ++counts[s.instance]; });
  std::vector<std::pair<uint64_t, std::string>> ranked;
  for (auto &[name, n] : counts) ranked.emplace_back(n, name);
  std::sort(ranked.begin(), ranked.end(), [](const auto &a, const auto &b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  auto &out = *rep->mutable_sessions_by_instance();
  for (size_t i = 0; i < ranked.size(); ++i)
    out[i < kMaxInstanceLabels ? ranked[i].second : "(other)"] += ranked[i].first;
}

void MetaEngine::CreateBatch(const Caller &c, const rpc::CreateBatchRequest &req,
                             rpc::ChunkBatchReply *rep) {
  if (int err = CheckKeys(options_.limits, static_cast<size_t>(req.creates_size())))
    return rep->set_error(err);
  RunOp(c, req, rep, [&](Txn &txn, Session *session) -> Status {
    std::unordered_set<std::string_view> seen;
    for (const rpc::CreateRequest &one : req.creates()) {
      rpc::ChunkReply *out = rep->add_chunks();
      const bool repeated = !one.ref().path().empty() && !seen.insert(one.ref().path()).second;
      Status s = repeated ? Status::Error(EEXIST) : CreateOp(c, one, out)(txn, session);
      if (!s.ok()) out->Clear();
      out->set_error(s.errnum());
    }
    return Status::Ok();
  });
}

void MetaEngine::SealBatch(const Caller &c, const rpc::SealBatchRequest &req,
                           rpc::ChunkBatchReply *rep) {
  if (int err = CheckKeys(options_.limits, static_cast<size_t>(req.seals_size())))
    return rep->set_error(err);
  RunOp(c, req, rep, [&](Txn &txn, Session *session) -> Status {
    for (const rpc::SealRequest &one : req.seals()) {
      rpc::ChunkReply *out = rep->add_chunks();
      Status s = SealOp(one, out)(txn, session);
      if (!s.ok()) out->Clear();
      out->set_error(s.errnum());
    }
    return Status::Ok();
  });
}

void MetaEngine::CountPrefix(const Caller &c, const rpc::LookupPrefixRequest &req,
                             rpc::CountPrefixReply *rep) {
  if (int err = CheckKeys(options_.limits, static_cast<size_t>(req.paths_size())))
    return rep->set_error(err);
  RunOp(c, req, rep, [&](Txn &, Session *) -> Status {
    for (const std::string &path : req.paths()) {
      rpc::Ref ref;
      ref.set_path(path);
      Result<Inode *> found = tree_.Resolve(ref, c);
      // What OpenForRead would refuse, without taking its lease.
      Status s = !found.ok()                        ? found.status()
                 : (*found)->is_dir()               ? Status::Error(EISDIR)
                 : !(*found)->is_file()             ? Status::Error(EINVAL)
                 : !(*found)->current               ? Status::Error(EBUSY)
                 : !MayAccess(**found, c, kMayRead) ? Status::Error(EACCES)
                                                    : Status::Ok();
      if (!s.ok()) {
        rep->set_miss_error(s.errnum());
        break;
      }
      rep->set_count(rep->count() + 1);
    }
    return Status::Ok();
  });
}

void MetaEngine::Alloc(const Caller &c, const rpc::AllocRequest &req, rpc::ChunkReply *rep) {
  RunOp(c, req, rep, [&](Txn &txn, Session *session) -> Status {
    if (req.size() == 0) return Status::Error(EINVAL, "an allocation needs a size");
    if (int err = CheckAllocation(options_.limits, *session))
      return Status::Error(err, "too many allocations in this session");
    MARU_RETURN_IF_ERROR(quotas_.MayReserve(*tree_.root(), c.uid, req.size()));
    Result<ExtentList> got = AllocateWithEviction(txn, req.size(), 0);
    if (!got.ok()) return got.status();
    if (req.contiguous() && got->size() > 1) {
      space_.FreeNow(*got);
      return Status::Error(ENOSPC, "no free run holds it in one extent");
    }
    if (Status s = ScrubForWriter(space_, c, *got); !s.ok()) {
      space_.FreeNow(*got);
      return s;
    }
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
  RunOp(c, req, rep, [&](Txn &txn, Session *session) -> Status {
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
    auto keep = [&](Status s) {
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

// Each path through Pin itself (a lock and a commit each): one round trip
// is what the caller saves, and Pin's rules stay in one place.
void MetaEngine::PinBatch(const Caller &c, const rpc::PinBatchRequest &req, rpc::ErrorsReply *rep) {
  if (int err = CheckKeys(options_.limits, static_cast<size_t>(req.paths_size())))
    return rep->set_error(err);
  const std::vector<bool> repeated = RepeatedPaths(req.paths());
  for (int i = 0; i < req.paths_size(); ++i) {
    if (repeated[static_cast<size_t>(i)]) {
      rep->add_errors(EEXIST);
      continue;
    }
    rpc::PinRequest one;
    *one.mutable_header() = req.header();
    if (i > 0) one.mutable_header()->clear_release();  // released with the first
    one.mutable_ref()->set_path(req.paths(i));
    one.set_pin(req.pin());
    one.set_ttl_ms(req.ttl_ms());
    rpc::AttrReply out;
    Pin(c, one, &out);
    if (out.error() == ENOTCONN) {
      rep->clear_errors();
      return rep->set_error(ENOTCONN);
    }
    rep->add_errors(out.error());
  }
}

void MetaEngine::UnlinkBatch(const Caller &c, const rpc::PathsRequest &req, rpc::ErrorsReply *rep) {
  if (int err = CheckKeys(options_.limits, static_cast<size_t>(req.paths_size())))
    return rep->set_error(err);
  RunOp(c, req, rep, [&](Txn &txn, Session *) -> Status {
    const std::vector<bool> repeated = RepeatedPaths(req.paths());
    for (int i = 0; i < req.paths_size(); ++i) {
      rpc::Ref ref;
      ref.set_path(req.paths(i));
      Status s = repeated[static_cast<size_t>(i)] ? Status::Error(EEXIST)
                                                  : RemoveEntry(txn, c, ref, false);
      rep->add_errors(s.errnum());
    }
    return Status::Ok();
  });
}

}  // namespace maru
