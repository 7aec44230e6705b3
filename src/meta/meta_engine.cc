// The engine's coordinator: opening it (the evictor, then the start in
// engine_recovery.cc), the inode and generation counters, the caller's
// session for every operation, and the periodic housekeeping. The
// operations themselves live in the engine_*.cc files (meta_engine.h).
#include "meta/meta_engine.h"

#include <algorithm>

#include "meta/engine_op.h"
#include "proto/grant_mac.h"
#include "util/clock.h"
#include "util/log.h"

namespace maru {
namespace {

constexpr uint64_t kCounterStep = 1 << 16;

}  // namespace

MetaEngine::MetaEngine(const EngineOptions &options)
    : options_(options), grant_key_(NewGrantKey()) {
  space_.set_on_free([this](uint64_t gen) REQUIRES(mu_) { quotas_.DropReads(gen); });
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
  MutexLock lock(&engine->mu_);  // nothing else runs yet; Load() is an operation like any
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

Result<Session *> MetaEngine::LiveSession(const Caller &c, uint64_t id) {
  Session *s = sessions_.Find(id);
  if (!s || s->orphaned) return Status::Error(ENOTCONN);
  // Checked before it counts as seen: another uid must not keep it alive.
  if (!c.MayActFor(s->uid)) return Status::Error(EPERM, "another uid's session");
  s->last_seen_ns = MonotonicNs();
  return s;
}

void MetaEngine::Tick() {
  MutexLock lock(&mu_);
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
      mu_.AssertHeld();  // called back within this operation
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

}  // namespace maru
