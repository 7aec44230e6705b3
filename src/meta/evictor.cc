#include "meta/evictor.h"

#include <algorithm>

#include "util/clock.h"
#include "util/log.h"
#include "util/units.h"

namespace maru {

Result<std::unique_ptr<Evictor>> Evictor::Make(const std::string &policy, Watermarks watermarks,
                                               NamespaceTree *tree, SpaceManager *space) {
  std::unique_ptr<Evictor> evictor(new Evictor(watermarks, tree, space));
  Result<std::unique_ptr<EvictionPolicy>> made = MakeEvictionPolicy(policy, evictor->chains_);
  if (!made.ok()) return made.status();
  evictor->policy_ = std::move(*made);
  return evictor;
}

Evictor::Evictor(Watermarks watermarks, NamespaceTree *tree, SpaceManager *space)
    : watermarks_(watermarks), tree_(*tree), space_(*space) {}

// --- What the engine tells ----------------------------------------------------

void Evictor::Sealed(const Inode &inode) {
  policy_->OnInsert(inode.ino);
  // A new version is a use, which puts a parked chunk back in the order;
  // whether it may go is decided again.
  if (held_.count(inode.ino)) Recheck(inode.ino, RealtimeNs());
}

void Evictor::Read(const Inode &inode) {
  policy_->OnAccess(inode.ino);
  // A read takes a lease: a parked chunk stays out of the order.
  if (held_.count(inode.ino)) policy_->Park(inode.ino);
}

void Evictor::SetParent(Inode *inode, uint64_t parent) {
  if (inode->parent_chunk == parent) return;
  // The policy reads the chains: it lets go of the chunk under the old
  // parent and takes it again under the new one.
  if (inode->current) policy_->OnRemove(inode->ino);
  chains_.SetParent(inode->ino, parent);
  if (inode->current) policy_->OnInsert(inode->ino);
  inode->parent_chunk = parent;
  if (held_.count(inode->ino)) policy_->Park(inode->ino);
}

void Evictor::Hint(const Inode &inode, RetentionHint hint) {
  if (!inode.current) return;  // the policy knows sealed chunks only
  policy_->OnHint(inode.ino, hint);
  // A parked chunk stays out of the order (a policy may put it back).
  if (held_.count(inode.ino)) policy_->Park(inode.ino);
}

void Evictor::Restored(const Inode &inode) {
  if (inode.parent_chunk) chains_.SetParent(inode.ino, inode.parent_chunk);
  if (inode.current) policy_->OnInsert(inode.ino);
}

void Evictor::Removed(const Inode &inode) {
  Unhold(inode.ino, false);
  if (inode.current) policy_->OnRemove(inode.ino);
  chains_.Remove(inode.ino);
}

void Evictor::Changed(const Inode &inode) {
  if (!held_.empty() && held_.count(inode.ino)) Recheck(inode.ino, RealtimeNs());
}

void Evictor::Unreferenced(uint64_t gen) {
  if (held_gens_.empty()) return;
  auto it = held_gens_.find(gen);
  if (it != held_gens_.end() && space_.refs(gen) == 0) Recheck(it->second, RealtimeNs());
}

// --- Held chunks --------------------------------------------------------------

void Evictor::Hold(const Inode &inode, int64_t now_ns) {
  const uint64_t gen = inode.current->gen;
  const int64_t deadline =
      inode.pinned && inode.pin_expiry_ns > now_ns ? inode.pin_expiry_ns : int64_t{0};
  auto it = held_.find(inode.ino);
  if (it != held_.end() && (it->second.gen != gen || it->second.pin_deadline != deadline)) {
    Unhold(inode.ino, false);  // forgets the old generation and deadline
    it = held_.end();
  }
  if (it == held_.end()) {
    held_.emplace(inode.ino, Held{gen, deadline});
    held_gens_[gen] = inode.ino;
    if (deadline) pin_deadlines_.emplace(deadline, inode.ino);
  }
  policy_->Park(inode.ino);
}

void Evictor::Unhold(uint64_t ino, bool unpark) {
  auto it = held_.find(ino);
  if (it == held_.end()) return;
  if (auto g = held_gens_.find(it->second.gen); g != held_gens_.end() && g->second == ino)
    held_gens_.erase(g);
  auto [first, last] = pin_deadlines_.equal_range(it->second.pin_deadline);
  for (auto d = first; d != last; ++d)
    if (d->second == ino) {
      pin_deadlines_.erase(d);
      break;
    }
  held_.erase(it);
  if (unpark) policy_->Unpark(ino);
}

void Evictor::Recheck(uint64_t ino, int64_t now_ns) {
  const Inode *inode = tree_.Find(ino);
  if (!inode || !inode->current) return Unhold(ino, false);
  if (Evictable(*inode, now_ns, 0)) return Unhold(ino, true);
  Hold(*inode, now_ns);
}

void Evictor::ReleaseExpiredPins(int64_t now_ns) {
  while (!pin_deadlines_.empty() && pin_deadlines_.begin()->first <= now_ns) {
    const uint64_t ino = pin_deadlines_.begin()->second;
    pin_deadlines_.erase(pin_deadlines_.begin());
    if (auto it = held_.find(ino); it != held_.end()) it->second.pin_deadline = 0;
    Recheck(ino, now_ns);
  }
}

// --- Choosing and evicting ----------------------------------------------------

bool Evictor::Evictable(const Inode &inode, int64_t now_ns, uint64_t spared) const {
  if (!inode.current || inode.pending || inode.ino == spared) return false;
  if (inode.pinned && (inode.pin_expiry_ns == 0 || inode.pin_expiry_ns > now_ns)) return false;
  return !space_.in_use(inode.current->gen);  // leased, or held in an index lease slot
}

uint64_t Evictor::NextVictim(int64_t now_ns) {
  std::vector<uint64_t> passed;
  uint64_t victim = policy_->Victim([&](uint64_t ino) {
    const Inode *inode = tree_.Find(ino);
    if (inode && Evictable(*inode, now_ns, 0)) return true;
    passed.push_back(ino);
    return false;
  });
  HoldPassed(passed, now_ns);
  return victim;
}

void Evictor::HoldPassed(const std::vector<uint64_t> &passed, int64_t now_ns) {
  for (uint64_t ino : passed) {
    const Inode *inode = tree_.Find(ino);
    if (inode && inode->current)
      Hold(*inode, now_ns);
    else
      policy_->Park(ino);  // not a chunk (the policy was not told): out for good
  }
}

std::vector<uint64_t> Evictor::EvictableDescendants(uint64_t ino, uint64_t spared) const {
  const int64_t now = RealtimeNs();
  std::vector<uint64_t> found;
  chains_.ForEachDescendant(ino, [&](uint64_t child) {
    if (const Inode *other = tree_.Find(child); other && Evictable(*other, now, spared))
      found.push_back(child);
  });
  return found;
}

uint64_t Evictor::Evict(const Scope &scope, Inode *inode, const char *reason) {
  const uint64_t bytes = TotalLength(inode->current->extents);
  ++evictions_;
  evicted_bytes_ += bytes;
  ++evictions_by_reason_[reason];
  scope.remove(inode);
  return bytes;
}

uint64_t Evictor::EvictChunk(const Scope &scope, Inode *inode, const char *reason,
                             uint64_t spared) {
  std::vector<uint64_t> descendants;
  // Chunks extending this one are useless without it.
  if (policy_->EvictsDescendants()) descendants = EvictableDescendants(inode->ino, spared);
  uint64_t bytes = Evict(scope, inode, reason);
  for (uint64_t ino : descendants)
    if (Inode *d = tree_.Find(ino); d && d->current) bytes += Evict(scope, d, "prefix_gone");
  return bytes;
}

uint64_t Evictor::EvictBytes(const Scope &scope, uint64_t bytes, const char *reason) {
  uint64_t evicted = 0;
  const int64_t now = RealtimeNs();
  ReleaseExpiredPins(now);
  while (evicted < bytes) {
    uint64_t victim = NextVictim(now);
    if (!victim) break;
    evicted += EvictChunk(scope, tree_.Find(victim), reason, 0);
  }
  return evicted;
}

Result<std::unordered_set<uint64_t>> Evictor::ChooseVictims(uint64_t shortfall, uint64_t spared) {
  const int64_t now = RealtimeNs();
  std::unordered_set<uint64_t> chosen;
  std::vector<uint64_t> passed;
  uint64_t covered = 0;
  if (shortfall > 0) {
    ReleaseExpiredPins(now);
    policy_->InOrder([&](uint64_t ino) {
      // The spared chunk may go once this operation is done: skipped, not held.
      if (ino == spared || chosen.count(ino)) return true;
      const Inode *inode = tree_.Find(ino);
      if (!inode || !Evictable(*inode, now, 0)) {
        passed.push_back(ino);
        return true;
      }
      chosen.insert(ino);
      covered += TotalLength(inode->current->extents);
      return covered < shortfall;
    });
    HoldPassed(passed, now);
  }
  if (covered < shortfall) {
    LOG_DEBUG("no room: %lu free, %lu retired, %zu chosen covering %lu of %lu", space_.free_bytes(),
              space_.retired_bytes(), chosen.size(), covered, shortfall);
    return Status::Error(ENOSPC, "pool full of pinned, open or unsealed chunks");
  }
  return chosen;
}

Status Evictor::MakeRoom(const Scope &scope, uint64_t bytes, uint64_t spared) {
  if (space_.in_grace(MonotonicNs()))
    return Status::Error(ENOSPC,
                         "pool full, and space freed before the restart is still held "
                         "for returning readers");
  const uint64_t unit = space_.unit();
  const uint64_t need = (bytes + unit - 1) / unit * unit;
  Result<std::unordered_set<uint64_t>> victims =
      ChooseVictims(need - std::min(need, space_.free_bytes()), spared);
  if (!victims.ok()) return victims.status();
  for (uint64_t ino : *victims)
    if (Inode *inode = tree_.Find(ino); inode && inode->current)
      EvictChunk(scope, inode, "full", spared);
  return Status::Ok();
}

// --- Watermarks and counters --------------------------------------------------

uint64_t Evictor::ReclaimableUse(MetaDb::Batch *batch) {
  // Retired versions nobody reads are freed first; those still read stay
  // whatever is evicted, so they do not count.
  space_.Tick(MonotonicNs(), batch);
  const uint64_t used = space_.capacity() - space_.free_bytes();
  return used - std::min(used, space_.retired_bytes());
}

void Evictor::EvictToLowWatermark(const Scope &scope) {
  // During the grace after a restart evicted space is not freed, so
  // evicting would only empty the cache.
  if (space_.in_grace(MonotonicNs())) return;
  const double capacity = static_cast<double>(space_.capacity());
  const uint64_t use = ReclaimableUse(scope.batch);
  if (static_cast<double>(use) <= watermarks_.high * capacity) return;
  const uint64_t target = static_cast<uint64_t>(watermarks_.low * capacity);
  if (use > target) EvictBytes(scope, use - target, "watermark");
}

void Evictor::FillStats(rpc::StatsReply *rep) const {
  rep->set_evictions(evictions_);
  rep->set_evicted_bytes(evicted_bytes_);
  for (const auto &[reason, n] : evictions_by_reason_)
    (*rep->mutable_evictions_by_reason())[reason] = n;
}

}  // namespace maru
