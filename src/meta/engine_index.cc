// The engine's side of the shared-memory index (meta/shm_index.h): making
// it at start and handing each session its lease slots.
#include "meta/engine_op.h"
#include "util/clock.h"
#include "util/phase_clock.h"

namespace maru {

Result<std::unique_ptr<ShmIndex>> MetaEngine::MakeIndex(const std::vector<Inode *> &order,
                                                        uint64_t pool_units) const {
  PhaseClock clock;
  IndexOptions o = options_.index_options;
  if (o.path.empty()) o.path = DefaultIndexPath(options_.pool_paths.front(), pool_uuid_);
  Result<std::unique_ptr<ShmIndex>> made =
      ShmIndex::Create(o, options_.pool_paths.front(), pool_units, tree_);
  if (!made.ok()) return made;
  (*made)->PublishAll(order);
  LOG_INFO("shared-memory index at %s (%zu chunks entered in %.0f ms, cpu %.0f)",
           (*made)->path().c_str(), (*made)->entries_used(), clock.total_ms(),
           clock.total_cpu_ms());
  return made;
}

void MetaEngine::InstallIndex(Result<std::unique_ptr<ShmIndex>> made) {
  if (!made.ok()) {
    LOG_WARN("no shared-memory index (clients will use messages): %s",
             made.status().ToString().c_str());
    return;
  }
  index_ = std::move(*made);
  space_.set_outside_readers({[this](uint64_t gen) { index_->Retiring(gen); },
                              [this](uint64_t gen) { return index_->Held(gen); }});
}

void MetaEngine::AssignIndexRegion(Session *s, rpc::OpenSessionReply *rep) {
  if (!index_) return;
  LeaseSlots::Assigned a = index_->AssignRegion(s->id);
  rep->set_index_path(index_->path());
  rep->set_index_instance(index_->instance());
  rep->set_index_region(a.region);
  rep->set_index_token(a.token);
}

void MetaEngine::NoteIndexReads() {
  if (!index_) return;
  index_->DrainReads([this](uint64_t ino, uint64_t gen) {
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
