// Start: what a restarted server finds again.
//
// MetaEngine::Load opens the database, reconciles the pool's devices
// (pool_identity.h), and rebuilds the in-memory state from the records:
// the namespace (orphans to /lost+found), the space every version holds,
// the eviction order and chains, pins, and the sessions that were writing
// (orphaned, waiting for their clients to resume). Retired versions keep
// their space until a grace period has passed, so readers from before the
// restart can renew their leases.
#include <malloc.h>

#include <algorithm>
#include <future>
#include <thread>

#include "meta/engine_op.h"
#include "meta/meta_engine.h"
#include "meta/pool_identity.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/phase_clock.h"
#include "util/units.h"

namespace maru {

namespace {

// Two versions claiming one extent: serving on would hand one's bytes to
// the other's readers as soon as either is freed. Stop, loudly.
Status Overlapping(const std::string &what, const Status &s) {
  LOG_ERROR("%s: %s; refusing to start: run `maructl fsck` to see what overlaps", what.c_str(),
            s.ToString().c_str());
  return Status::Error(EUCLEAN, what + ": " + s.ToString() + "; run maructl fsck");
}

// What MarkSpaceUsed found: the first version whose extents overlap
// another's, if any.
struct MarkedSpace {
  Status status;
  const Inode *inode = nullptr;
  uint64_t gen = 0;
};

// Marks the extents of every version of `inodes` used, in order; stops at
// the first that overlaps.
MarkedSpace MarkSpaceUsed(SpaceManager *space, const std::vector<Inode *> &inodes) {
  MarkedSpace out;
  ForEachInode(inodes, [&](const Inode *inode) {
    for (const Version *v : {inode->current ? &*inode->current : nullptr,
                             inode->pending ? &*inode->pending : nullptr}) {
      if (!v || !out.status.ok()) continue;  // (after an overlap: nothing more)
      out.status = space->MarkUsed(v->extents);
      if (!out.status.ok()) {
        out.inode = inode;
        out.gen = v->gen;
      }
    }
  });
  return out;
}

// Decodes records [from, to) into out[from, to); the first corrupt one's
// index, or `to`.
size_t DecodeRange(const Records<schema::Inode> &records, size_t from, size_t to,
                   std::unique_ptr<Inode> *out) {
  schema::Inode r;  // reused: one record decoded at a time
  for (size_t i = from; i < to; ++i) {
    if (!records.Parse(i, &r)) return i;
    out[i] = std::make_unique<Inode>(FromRecord(r));
  }
  return to;
}

// Decodes every record into out[]; the first corrupt one's index, or the
// number of records. Most of a load's work, and each record on its own: a
// large load is cut into one part per core (up to 4), each part's inodes
// still made in order.
size_t DecodeInodes(const Records<schema::Inode> &records, std::unique_ptr<Inode> *out) {
  constexpr size_t kPerPartMin = 1 << 16;
  const size_t n = records.size();
  const size_t parts = std::clamp<size_t>(
      std::min<size_t>(std::thread::hardware_concurrency(), n / kPerPartMin), 1, 4);
  std::vector<size_t> bad(parts, n);
  std::vector<std::thread> helpers;
  for (size_t p = 1; p < parts; ++p)
    helpers.emplace_back([&, p] {
      const size_t to = n * (p + 1) / parts, got = DecodeRange(records, n * p / parts, to, out);
      if (got < to) bad[p] = got;
    });
  if (size_t got = DecodeRange(records, 0, n / parts, out); got < n / parts) bad[0] = got;
  for (std::thread &t : helpers) t.join();
  return *std::min_element(bad.begin(), bad.end());
}

}  // namespace

// From here on every metadata write, the start's own included, goes to the
// pool's replication log first (when the pool has one), so that standbys
// hold what this server holds.
Status MetaEngine::AttachReplicationLog() {
  if (options_.pool_paths.empty()) return Status::Ok();
  Result<std::unique_ptr<PoolLog>> log = PoolLog::Open(options_.pool_paths[0]);
  if (!log.ok()) return log.status();
  if (!*log) return Status::Ok();
  pool_log_ = std::move(*log);
  pool_log_->log().Authenticate(options_.log_key);
  if (options_.log_key.empty())
    LOG_WARN(
        "the replication log is not signed: a member of the pool's group could forge metadata "
        "for standbys (give the servers --replication-key-file)");
  return db_->AttachLog(&pool_log_->log(), options_.log_epoch, options_.log_fence);
}

Status MetaEngine::Load() {
  PhaseClock clock;
  Result<std::unique_ptr<MetaDb>> db = MetaDb::Open(options_.db_dir, options_.sync_writes);
  if (!db.ok()) return db.status();
  db_ = std::move(*db);
  MARU_RETURN_IF_ERROR(AttachReplicationLog());
  Result<MetaDb::Contents> contents = db_->Load();
  if (!contents.ok()) return contents.status();
  clock.Lap("read");
  started_ns_ = MonotonicNs();
  Txn txn(this);
  Result<std::string> pool =
      ReconcilePoolIdentity(options_.pool_paths, &*contents, &txn.batch, &space_);
  if (!pool.ok()) return pool.status();
  pool_uuid_ = *pool;
  clock.Lap("identity");
  std::vector<Inode *> adopted;
  // Made beside the rest (and waited for, also on an error: declared after
  // what it reads).
  std::future<Result<std::unique_ptr<ShmIndex>>> index;
  MARU_RETURN_IF_ERROR(RestoreInodes(*contents, &txn.batch, &clock, &adopted, &index));
  quotas_.Load(contents->quotas, space_.unit());  // usage from the inodes just restored
  clock.Lap("quotas");
  const bool had_data = !contents->inodes.empty() || !contents->retired.empty();
  contents->inodes = {};  // restored: not needed again
  // Reserve counters now so that numbers are never handed out twice.
  NextIno(txn);
  NextGen(txn);
  MARU_RETURN_IF_ERROR(txn.Commit());
  clock.Lap("commit");
  // The records were decoded into memory the server keeps no longer; give
  // it back rather than hold it for the server's life.
  malloc_trim(0);
  clock.Lap("trim");
  if (index.valid()) {
    MARU_RETURN_IF_ERROR(InstallIndex(index.get()));
    clock.Lap("index (the rest of it)");
  }
  db_->StartCompactions();
  // Clients can come back only once the server answers: their grace, and
  // the clock of the sessions they resume, start now, not when the load did.
  const int64_t serving_ns = MonotonicNs();
  int64_t grace_ms = options_.grace_ms >= 0 ? options_.grace_ms : options_.session_timeout_ms;
  if (had_data) space_.SetGraceUntil(serving_ns + grace_ms * 1000000);
  sessions_.SeenAll(serving_ns);
  LOG_INFO("start: %s", clock.laps().c_str());
  LOG_INFO("metadata loaded: %zu inodes, %s of %s free, %zu unfinished writes, %zu retired",
           tree_.size(), FormatSize(space_.free_bytes()).c_str(),
           FormatSize(space_.capacity()).c_str(), static_cast<size_t>(sessions_.size()),
           space_.retired().size());
  return Status::Ok();
}

Status MetaEngine::RestoreInodes(MetaDb::Contents &contents, MetaDb::Batch *batch,
                                 PhaseClock *clock, std::vector<Inode *> *adopted,
                                 std::future<Result<std::unique_ptr<ShmIndex>>> *index) {
  const int64_t now = RealtimeNs();
  const size_t n = contents.inodes.size();
  std::vector<std::unique_ptr<Inode>> decoded(n);
  if (size_t bad = DecodeInodes(contents.inodes, decoded.data()); bad < n)
    return Status::Error(EIO, "corrupted metadata record (inode record " + std::to_string(bad) +
                                  " of " + std::to_string(n) + ")");
  clock->Lap("decode");
  // The index's memory is made ready (2 GiB at 16Mi entries) while this
  // thread alone adopts the inodes.
  if (options_.index) *index = std::async(std::launch::async, [this] { return CreateIndex(); });
  AdoptInodes(contents, decoded, batch, now, adopted);
  clock->Lap("adopt");
  // Three jobs from here on, each on a core while there are cores:
  // - the index reads each inode's number, name, parent and version, all
  //   in place once it is adopted, not the links between them;
  // - the space every version holds is marked, then the eviction order
  //   restored: neither reads what linking writes (directories' entries);
  // - this thread links the tree.
  // Marked in number order, which is the order they were made in, so that
  // their extents come off the free space in order (no scattering of free
  // runs); the eviction order also starts as that order.
  auto fill_index = [&](std::future<Result<std::unique_ptr<ShmIndex>>> created) {
    *index =
        std::async(std::launch::async, [this, adopted, created = std::move(created)]() mutable {
          return FillIndex(created.get(), *adopted);
        });
  };
  if (index->valid()) fill_index(std::move(*index));
  MarkedSpace marked;
  // Start's threads share the engine by dividing its work, not by its lock.
  std::thread restorer([&]() NO_THREAD_SAFETY_ANALYSIS {
    marked = MarkSpaceUsed(&space_, *adopted);
    if (!marked.status.ok()) return;
    evictor_->Reserve(adopted->size());
    ForEachInode(*adopted, [&](Inode *inode) NO_THREAD_SAFETY_ANALYSIS { RestoreChunk(*inode); });
  });
  std::vector<Inode *> orphans = tree_.LinkAll(*adopted);
  restorer.join();
  clock->Lap("link, space and eviction");
  if (!marked.status.ok())
    return Overlapping(
        tree_.PathOf(*marked.inode) + " (generation " + std::to_string(marked.gen) + ")",
        marked.status);
  if (!orphans.empty()) {
    // Their paths change, and a directory is adopted: the index made from
    // the old paths is dropped and made anew (rare: a damaged database).
    const bool indexed = index->valid();
    if (indexed) index->get();
    MoveOrphansToLostFound(orphans, batch, now);
    if (indexed) fill_index(std::async(std::launch::async, [this] { return CreateIndex(); }));
  }
  MARU_RETURN_IF_ERROR(RestoreRetired(contents));
  clock->Lap("retired");
  return Status::Ok();
}

// Every inode into the tree (a fresh root if there was none), and the
// counters past every number in use.
void MetaEngine::AdoptInodes(const MetaDb::Contents &contents,
                             std::vector<std::unique_ptr<Inode>> &decoded, MetaDb::Batch *batch,
                             int64_t now, std::vector<Inode *> *adopted) {
  uint64_t max_ino = kRootIno, max_gen = 0;
  tree_.Reserve(decoded.size() + 2);  // and a root, and lost+found
  adopted->reserve(decoded.size());
  for (std::unique_ptr<Inode> &inode : decoded) {
    max_ino = std::max(max_ino, inode->ino);
    if (inode->current) max_gen = std::max(max_gen, inode->current->gen);
    if (inode->pending) max_gen = std::max(max_gen, inode->pending->gen);
    adopted->push_back(tree_.Adopt(std::move(inode)));
  }
  for (const schema::Retired &retired : contents.retired)
    max_gen = std::max(max_gen, retired.gen());
  if (!tree_.root()) {
    auto root = std::make_unique<Inode>();
    root->ino = kRootIno;
    root->mode = S_IFDIR | options_.root_mode;
    root->atime_ns = root->mtime_ns = root->ctime_ns = now;
    batch->PutInode(ToRecord(*root));
    tree_.Adopt(std::move(root));
  }
  next_ino_ = std::max(max_ino + 1, contents.counters.ino_limit());
  next_gen_ = std::max(max_gen + 1, contents.counters.gen_limit());
  ino_limit_ = gen_limit_ = 0;  // the first allocation writes new limits
}

void MetaEngine::MoveOrphansToLostFound(const std::vector<Inode *> &orphans, MetaDb::Batch *batch,
                                        int64_t now) {
  Inode *root = tree_.root();
  Inode *lost = tree_.Child(*root, "lost+found");
  if (!lost || !lost->is_dir()) {
    auto dir = std::make_unique<Inode>();
    dir->ino = next_ino_++;
    dir->mode = S_IFDIR | 0700;
    dir->atime_ns = dir->mtime_ns = dir->ctime_ns = now;
    lost = tree_.Adopt(std::move(dir));
    tree_.Link(root, lost, "lost+found");
    batch->PutInode(ToRecord(*lost));
  }
  for (Inode *inode : orphans) {
    std::string name = "#" + std::to_string(inode->ino);
    tree_.Link(lost, inode, name);
    batch->PutInode(ToRecord(*inode));
  }
  LOG_WARN("%zu inodes had no directory; moved them to /lost+found", orphans.size());
}

// What one inode holds besides its space (marked already): its place in
// eviction, its pin, and the reservation of a writer from before the
// restart.
void MetaEngine::RestoreChunk(Inode &inode) {
  evictor_->Restored(inode);
  if (inode.pinned) ++pins_;
  if (inode.pinned && inode.pin_expiry_ns)
    next_pin_expiry_ns_ = std::min(next_pin_expiry_ns_, inode.pin_expiry_ns);
  if (inode.pending) {
    Session *s = OrphanedSession(inode.pending->writer_session, inode.pending->writer_uid);
    s->reservations.insert(inode.ino);
    space_.Ref(inode.pending->gen);
    reserved_bytes_ += TotalLength(inode.pending->extents);
  }
}

Status MetaEngine::RestoreRetired(const MetaDb::Contents &contents) {
  for (const schema::Retired &r : contents.retired) {
    ExtentList extents = FromRecordExtents(r.extents());
    Status s = space_.MarkUsed(extents);
    if (!s.ok()) return Overlapping("retired generation " + std::to_string(r.gen()), s);
    space_.RestoreRetired(r.gen(), extents, r.ino());
    if (r.writer_session()) {
      OrphanedSession(r.writer_session(), r.writer_uid())->orphan_gens.insert(r.gen());
      space_.Ref(r.gen());
      quotas_.Hold(r.gen(), r.has_charged_uid() ? r.charged_uid() : r.writer_uid(),
                   TotalLength(extents));
    }
  }
  return Status::Ok();
}

// A session known only from what the database says it was writing; it
// waits for its client to come back (resume) until it times out.
Session *MetaEngine::OrphanedSession(uint64_t id, uint32_t uid) {
  if (Session *s = sessions_.Find(id)) return s;
  Session *s = sessions_.Create(id, uid);
  s->orphaned = true;
  s->client = "(from before restart)";
  s->since_ns = RealtimeNs();
  s->last_seen_ns = MonotonicNs();
  return s;
}

}  // namespace maru
