#include "meta/lease_table.h"

#include <sys/random.h>

#include <ctime>

namespace maru {

LeaseTable::LeaseTable() {
  uint64_t r = 0;
  if (getrandom(&r, sizeof(r), 0) != sizeof(r)) r = static_cast<uint64_t>(time(nullptr)) << 32;
  next_id_ = (r >> 2) + 1;  // far from wrapping
}

uint64_t LeaseTable::Grant(uint64_t session, uint64_t ino, uint64_t gen) {
  uint64_t id = next_id_++;
  leases_.emplace(id, Lease{id, session, ino, gen});
  return id;
}

std::optional<Lease> LeaseTable::Take(uint64_t id, uint64_t session) {
  auto it = leases_.find(id);
  if (it == leases_.end() || it->second.session != session) return std::nullopt;
  Lease lease = it->second;
  leases_.erase(it);
  return lease;
}

const Lease *LeaseTable::Find(uint64_t id) const {
  auto it = leases_.find(id);
  return it == leases_.end() ? nullptr : &it->second;
}

}  // namespace maru
