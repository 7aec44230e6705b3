// The engine's side of the shared-memory index (meta/shm_index.h): making
// it at start and handing each session its lease slots.
#include "meta/engine_op.h"

#include <cerrno>

#include "meta/client_limits.h"
#include "util/clock.h"
#include "util/phase_clock.h"

namespace maru {

Result<std::unique_ptr<ShmIndex>> MetaEngine::CreateIndex() const {
  PhaseClock clock;
  IndexOptions o = options_.index_options;
  if (o.path.empty()) o.path = DefaultIndexPath(options_.pool_paths.front(), pool_uuid_);
  // The pool says it (every host reads the same superblock).
  for (const SpaceManager::Device &d : space_.devices())
    if (d.superblock.coherence == Coherence::kFlush) o.flush = true;
  // A region reserved for it in the first device (maructl mkpool
  // --index-size): the index goes there, where every host finds it. The
  // superblock was read and checked at start: the region's bounds are the
  // server's own copy, whatever the pool holds now.
  if (!space_.devices().empty()) {
    const Superblock &sb = space_.devices().front().superblock;
    o.pool_offset = sb.index_offset;
    o.pool_bytes = sb.index_bytes;
  }
  const uint64_t units = space_.unit() ? space_.capacity() / space_.unit() : 0;
  Result<std::unique_ptr<ShmIndex>> made =
      ShmIndex::Create(o, options_.pool_paths.front(), units, tree_);
  if (made.ok())
    LOG_INFO("shared-memory index at %s made in %.0f ms (cpu %.0f)",
             (*made)->in_pool() ? "the pool's index region" : (*made)->path().c_str(),
             clock.total_ms(), clock.total_cpu_ms());
  return made;
}

Result<std::unique_ptr<ShmIndex>> MetaEngine::FillIndex(Result<std::unique_ptr<ShmIndex>> made,
                                                        const std::vector<Inode *> &order) const {
  if (!made.ok()) return made;
  PhaseClock clock;
  (*made)->PublishAll(order);
  LOG_INFO("shared-memory index: %zu chunks entered in %.0f ms (cpu %.0f)", (*made)->entries_used(),
           clock.total_ms(), clock.total_cpu_ms());
  return made;
}

Status MetaEngine::InstallIndex(Result<std::unique_ptr<ShmIndex>> made) {
  // A pool made with a region for the index gets it or nothing: its
  // operator asked for lookups on every host.
  const bool in_pool =
      !space_.devices().empty() && space_.devices().front().superblock.index_bytes != 0;
  if (!made.ok() && in_pool) return made.status();
  if (!made.ok()) {
    LOG_WARN("no shared-memory index (clients will use messages): %s",
             made.status().ToString().c_str());
    return Status::Ok();
  }
  index_ = std::move(*made);
  space_.set_outside_readers({[this](uint64_t gen) { index_->Retiring(gen); },
                              [this](uint64_t gen) { return index_->Held(gen); }});
  return Status::Ok();
}

void MetaEngine::AssignIndexRegion(const Caller &c, Session *s, rpc::OpenSessionReply *rep) {
  if (!index_) return;
  // Only for a caller that can open the index (root, the pool's owner, its
  // group): regions are few, and one uid outside them opening many
  // sessions would leave none for the clients that can use them.
  if (!index_->MayOpen(c)) return index_->DropRegion(s->id);
  // Slot leases count against --max-leases: the server honours no more
  // slots than that, and an open by message counts the filled ones.
  const uint32_t max = options_.limits.leases_per_session;
  const uint32_t limit = s->uid == 0 || max == 0 ? index_->slots_per_region() : max;
  LeaseSlots::Assigned a = index_->AssignRegion(s->id, s->uid, limit);
  rep->set_index_path(index_->path());
  rep->set_index_in_pool(index_->in_pool());
  if (index_->in_pool()) {
    rep->set_index_uid(c.uid);
    rep->set_index_gid(c.gid);
    for (uint32_t g : c.groups) rep->add_index_groups(g);
  }
  rep->set_index_instance(index_->instance());
  rep->set_index_region(a.region);
  rep->set_index_token(a.token);
}

int MetaEngine::CheckLeaseCount(const Session &s) const {
  if (int err = CheckLease(options_.limits, s)) return err;
  const uint32_t max = options_.limits.leases_per_session;
  if (!index_ || s.uid == 0 || max == 0) return 0;
  return s.leases.size() + index_->SlotLeases(s.id) >= max ? EMFILE : 0;
}

void MetaEngine::NoteIndexReads() {
  if (!index_) return;
  index_->DrainReads([this](uint64_t ino, uint64_t gen) {
    mu_.AssertHeld();  // called back within this operation
    Inode *inode = tree_.Find(ino);
    if (!inode || !inode->current || inode->current->gen != gen) return;
    // What OpenForRead does for an open by message.
    ++inode->hits;
    inode->atime_ns = RealtimeNs();
    evictor_->Read(*inode);
    bytes_loaded_ += inode->current->size;
    ++lookups_;
    ++lookup_hits_;
  });
}

}  // namespace maru
