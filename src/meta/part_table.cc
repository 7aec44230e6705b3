#include "meta/part_table.h"

#include <cerrno>

namespace maru {

int PartTable::CheckParts(uint64_t size, uint32_t parts) {
  if (parts <= 1) return 0;
  if (parts > kMaxParts || size % parts != 0) return EINVAL;
  return 0;
}

void PartTable::LeaseGranted(uint64_t lease, uint64_t gen) {
  std::shared_ptr<Entry> &e = entries_[gen];
  if (!e) e = std::make_shared<Entry>();
  ++e->leases;
  leases_[lease] = gen;
}

void PartTable::LeaseGone(uint64_t lease) {
  auto l = leases_.find(lease);
  if (l == leases_.end()) return;  // not a partial lease
  auto it = entries_.find(l->second);
  leases_.erase(l);
  if (it == entries_.end()) return;
  // A wait in progress keeps its entry through its shared_ptr.
  if (--it->second->leases == 0) entries_.erase(it);
}

std::shared_ptr<PartTable::Entry> PartTable::Find(uint64_t gen) const {
  auto it = entries_.find(gen);
  return it == entries_.end() ? nullptr : it->second;
}

void PartTable::Published(uint64_t gen) {
  if (auto it = entries_.find(gen); it != entries_.end()) it->second->changed.SignalAll();
}

void PartTable::Ended(uint64_t gen, State state) {
  auto it = entries_.find(gen);
  if (it == entries_.end() || it->second->state != State::kWriting) return;
  it->second->state = state;
  it->second->changed.SignalAll();
}

int PartTable::AddWaiter(uint64_t session, uint32_t uid) {
  if (waiters_ >= kMaxWaiters) return ENFILE;
  uint32_t &mine = waiting_[session];
  if (mine >= kMaxWaitersPerSession) return EMFILE;
  if (uid != 0 && waiting_by_uid_[uid] >= kMaxWaitersPerUid) return EMFILE;
  ++mine;
  ++waiters_;
  if (uid != 0) ++waiting_by_uid_[uid];
  return 0;
}

void PartTable::RemoveWaiter(uint64_t session, uint32_t uid) {
  auto it = waiting_.find(session);
  if (it == waiting_.end()) return;
  --waiters_;
  if (--it->second == 0) waiting_.erase(it);
  if (auto by = waiting_by_uid_.find(uid); by != waiting_by_uid_.end() && --by->second == 0)
    waiting_by_uid_.erase(by);
}

}  // namespace maru
