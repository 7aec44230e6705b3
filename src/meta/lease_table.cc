#include "meta/lease_table.h"

#include <sys/random.h>

#include <ctime>

namespace maru {

LeaseTable::LeaseTable() {
  uint64_t r = 0;
  if (getrandom(&r, sizeof(r), 0) != sizeof(r)) r = static_cast<uint64_t>(time(nullptr)) << 32;
  next_id_ = (r >> 2) + 1;  // far from wrapping
}

uint64_t LeaseTable::Grant(uint64_t session, uint64_t ino, uint64_t gen, uint32_t uid) {
  uint64_t id = next_id_++;
  leases_.emplace(id, Lease{id, session, ino, gen, uid});
  ++by_gen_[gen][uid];
  return id;
}

std::optional<Lease> LeaseTable::Take(uint64_t id, uint64_t session) {
  auto it = leases_.find(id);
  if (it == leases_.end() || it->second.session != session) return std::nullopt;
  Lease lease = it->second;
  leases_.erase(it);
  auto holders = by_gen_.find(lease.gen);
  if (auto n = holders->second.find(lease.uid); --n->second == 0) holders->second.erase(n);
  if (holders->second.empty()) by_gen_.erase(holders);
  return lease;
}

std::vector<uint32_t> LeaseTable::Holders(uint64_t gen) const {
  std::vector<uint32_t> uids;
  if (auto it = by_gen_.find(gen); it != by_gen_.end())
    for (const auto &[uid, n] : it->second) uids.push_back(uid);
  return uids;
}

uint32_t LeaseTable::Held(uint64_t gen, uint32_t uid) const {
  auto it = by_gen_.find(gen);
  if (it == by_gen_.end()) return 0;
  auto n = it->second.find(uid);
  return n == it->second.end() ? 0 : n->second;
}

const Lease *LeaseTable::Find(uint64_t id) const {
  auto it = leases_.find(id);
  return it == leases_.end() ? nullptr : &it->second;
}

}  // namespace maru
