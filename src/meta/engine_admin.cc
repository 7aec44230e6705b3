// Administration: what maructl, marutop and /metrics ask of the engine.
//
// Read-only views (stats, sessions, chunk listings), eviction by hand, and
// fsck. They share the engine's lock and state like every operation, but
// none is on the data path, so they live apart from the operations that
// are.
#include <algorithm>

#include "meta/engine_op.h"
#include "meta/meta_engine.h"
#include "util/clock.h"
#include "util/units.h"

namespace maru {
namespace {

constexpr uint32_t kListDefault = 1024;
constexpr uint32_t kListMax = 16384;

void FillSession(const Session &s, const Caller &c, int64_t mono, int64_t real,
                 rpc::SessionInfo *info) {
  // A session id lets its owner resume it: shown to the owner and root.
  info->set_id(c.is_root() || c.uid == s.uid ? s.id : 0);
  info->set_client(s.client);
  info->set_hostname(s.hostname);
  info->set_pid(s.pid);
  info->set_uid(s.uid);
  info->set_since_ns(s.since_ns);
  info->set_last_seen_ns(real - (mono - s.last_seen_ns));
  info->set_leases(static_cast<uint32_t>(s.leases.size()));
  info->set_reservations(static_cast<uint32_t>(s.reservations.size()));
  info->set_orphaned(s.orphaned);
  info->set_instance(s.instance);
}

}  // namespace

// --- Sessions and stats -------------------------------------------------------

void MetaEngine::ListSessions(const Caller &c, const rpc::StatsRequest &req,
                              rpc::SessionsReply *rep) {
  RunOp(c, req, rep, [&](Txn &, Session *) REQUIRES(mu_) -> Status {
    const int64_t mono = MonotonicNs(), real = RealtimeNs();
    sessions_.ForEach(
        [&](const Session &s) { FillSession(s, c, mono, real, rep->add_sessions()); });
    return Status::Ok();
  });
}

void MetaEngine::Stats(const Caller &c, const rpc::StatsRequest &req, rpc::StatsReply *rep) {
  RunOp(c, req, rep, [&](Txn &, Session *) REQUIRES(mu_) -> Status {
    FillStats(rep);
    return Status::Ok();
  });
}

void MetaEngine::Snapshot(rpc::StatsReply *rep) {
  MutexLock lock(&mu_);
  FillStats(rep);
}

void MetaEngine::FillStats(rpc::StatsReply *rep) {
  op_stats_.Fill(rep);
  rep->set_lookups(lookups_);
  rep->set_lookup_hits(lookup_hits_);
  rep->set_leader_epoch(options_.log_epoch);
  if (options_.fill_server_stats) options_.fill_server_stats(rep);
  evictor_->FillStats(rep);
  quotas_.Fill(rep->mutable_quotas());
  rep->set_bytes_stored(bytes_stored_);
  rep->set_bytes_loaded(bytes_loaded_);
  rep->set_sessions(sessions_.size());
  FillSessionsByInstance(rep);
  rep->set_leases(leases_.size());
  rep->set_pins(pins_);
  rep->set_uptime_ns(MonotonicNs() - started_ns_);
  FillTopDirs(rep);
  for (const SpaceManager::Device &d : space_.devices()) FillDevice(d, rep->add_devices());
}

// The sealed chunks, in all and by top-level directory.
void MetaEngine::FillTopDirs(rpc::StatsReply *rep) {
  uint64_t chunks = 0;
  std::map<std::string, std::pair<uint64_t, uint64_t>> top;  // name -> bytes, chunks
  tree_.ForEach([&](const Inode &inode) {
    mu_.AssertHeld();  // called back within this operation
    if (!inode.current) return;
    ++chunks;
    const Inode *at = &inode;
    while (at && at->parent != kRootIno) at = tree_.Find(at->parent);
    if (!at) return;
    auto &u = top[at->name];
    u.first += TotalLength(inode.current->extents);
    u.second += 1;
  });
  rep->set_chunks(chunks);
  for (const auto &[name, usage] : top) {
    rpc::DirUsage *d = rep->add_top_dirs();
    d->set_name(name);
    d->set_bytes(usage.first);
    d->set_chunks(usage.second);
  }
}

// --- Chunk listings -----------------------------------------------------------

void MetaEngine::ListChunks(const Caller &c, const rpc::ListChunksRequest &req,
                            rpc::ListChunksReply *rep) {
  RunOp(c, req, rep, [&](Txn &, Session *) REQUIRES(mu_) { return ListChunksUnder(c, req, rep); });
}

// Depth-first in name order, so `after` (a full path) resumes a listing.
Status MetaEngine::ListChunksUnder(const Caller &c, const rpc::ListChunksRequest &req,
                                   rpc::ListChunksReply *rep) {
  rpc::Ref ref;
  ref.set_path(req.path().empty() ? "/" : req.path());
  Result<Inode *> top = tree_.Resolve(ref, c);
  if (!top.ok()) return top.status();
  uint32_t max = req.max() ? std::min(req.max(), kListMax) : kListDefault;
  std::vector<std::pair<const Inode *, std::string>> stack{{*top, tree_.PathOf(**top)}};
  bool more = false;
  while (!stack.empty()) {
    auto [inode, path] = stack.back();
    stack.pop_back();
    if (inode->is_dir()) {
      if (!MayAccess(*inode, c, kMayRead | kMayExec)) continue;
      for (auto it = inode->children.rbegin(); it != inode->children.rend(); ++it)
        if (const Inode *child = tree_.Find(it->second))
          stack.emplace_back(child, (path == "/" ? "" : path) + "/" + std::string(it->first));
      continue;
    }
    if (!req.after().empty() && path <= req.after()) continue;
    if (max == 0) {
      more = true;
      break;
    }
    --max;
    rpc::ChunkInfo *info = rep->add_chunks();
    info->set_path(path);
    FillAttr(*inode, info->mutable_attr());
    if (inode->current) ToWireExtents(inode->current->extents, info->mutable_extents());
    if (const Inode *parent = inode->parent_chunk ? tree_.Find(inode->parent_chunk) : nullptr)
      info->set_parent_path(tree_.PathOf(*parent));
  }
  rep->set_eof(!more);
  return Status::Ok();
}

// --- Eviction by hand ---------------------------------------------------------

void MetaEngine::Evict(const Caller &c, const rpc::EvictRequest &req, rpc::EvictReply *rep) {
  RunOp(c, req, rep, [&](Txn &txn, Session *) REQUIRES(mu_) -> Status {
    if (!c.is_root()) return Status::Error(EPERM, "eviction is for root");
    const uint64_t before = evictor_->evictions();
    uint64_t bytes = 0;
    if (!req.path().empty()) MARU_RETURN_IF_ERROR(EvictPath(txn, c, req.path(), &bytes));
    if (req.older_than_ms() > 0) bytes += EvictOlderThan(txn, req.older_than_ms());
    if (req.bytes() > 0) bytes += evictor_->EvictBytes(EvictionScope(txn), req.bytes(), "admin");
    rep->set_chunks(evictor_->evictions() - before);
    rep->set_bytes(bytes);
    return Status::Ok();
  });
}

Status MetaEngine::EvictPath(Txn &txn, const Caller &c, const std::string &path, uint64_t *bytes) {
  rpc::Ref ref;
  ref.set_path(path);
  Result<Inode *> inode = tree_.Resolve(ref, c);
  if (!inode.ok()) return inode.status();
  if (!(*inode)->is_file()) return Status::Error(EISDIR);
  if (!evictor_->Evictable(**inode, RealtimeNs(), 0))
    return Status::Error(EBUSY, "pinned, open or being written");
  *bytes += evictor_->EvictChunk(EvictionScope(txn), *inode, "admin", 0);
  return Status::Ok();
}

// Evicts every chunk that may go and was neither read nor written for
// `older_than_ms`.
uint64_t MetaEngine::EvictOlderThan(Txn &txn, int64_t older_than_ms) {
  const int64_t now = RealtimeNs();
  const int64_t cutoff = now - MsToNs(older_than_ms);
  std::vector<uint64_t> victims;
  tree_.ForEach([&](const Inode &inode) {
    mu_.AssertHeld();  // called back within this operation
    if (evictor_->Evictable(inode, now, 0) && std::max(inode.atime_ns, inode.mtime_ns) < cutoff)
      victims.push_back(inode.ino);
  });
  uint64_t bytes = 0;
  for (uint64_t ino : victims)
    if (Inode *inode = tree_.Find(ino); inode && evictor_->Evictable(*inode, now, 0))
      bytes += evictor_->EvictChunk(EvictionScope(txn), inode, "admin", 0);
  return bytes;
}

// --- Fsck ---------------------------------------------------------------------

void MetaEngine::Fsck(const Caller &c, const rpc::StatsRequest &req, rpc::FsckReply *rep) {
  RunOp(c, req, rep, [&](Txn &, Session *) REQUIRES(mu_) -> Status {
    if (!c.is_root()) return Status::Error(EPERM, "fsck is for root");
    CheckSpace(rep);
    return Status::Ok();
  });
}

// Rebuilds the free map from scratch and compares it with the live one.
void MetaEngine::CheckSpace(rpc::FsckReply *rep) {
  SpaceManager check;
  for (const SpaceManager::Device &d : space_.devices())
    check.AddDevice(d.index, d.path, d.superblock);
  uint64_t chunks = 0, extents = 0;
  tree_.ForEach([&](const Inode &inode) {
    mu_.AssertHeld();  // called back within this operation
    for (const Version *v :
         {inode.current ? &*inode.current : nullptr, inode.pending ? &*inode.pending : nullptr}) {
      if (!v) continue;
      if (inode.current && v == &*inode.current) ++chunks;
      extents += v->extents.size();
      if (TotalLength(v->extents) < v->size)
        rep->add_problems(tree_.PathOf(inode) + ": extents shorter than its size");
      Status s = check.MarkUsed(v->extents);
      if (!s.ok()) rep->add_problems(tree_.PathOf(inode) + ": " + s.message());
    }
    if (!inode.is_dir() && !tree_.Find(inode.parent))
      rep->add_problems(tree_.PathOf(inode) + ": no parent directory");
  });
  for (const auto &[gen, ext] : space_.retired()) {
    Status s = check.MarkUsed(ext);
    if (!s.ok())
      rep->add_problems("retired generation " + std::to_string(gen) + ": " + s.message());
  }
  if (check.FreeMaps() != space_.FreeMaps())
    rep->add_problems("free space map differs from the extent maps (leak or double use)");
  rep->set_chunks(chunks);
  rep->set_extents(extents);
}

namespace {

// Distinct instance names Stats reports; the rest are "(other)". Metrics
// label by them, and a label must not take unbounded values.
constexpr size_t kMaxInstanceLabels = 32;

}  // namespace

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

}  // namespace maru
