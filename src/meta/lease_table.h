// Read leases: a lease keeps one generation of one file from being reused
// while a reader may still point into it. Leases belong to a session and
// live as long as it does (heartbeats renew them all) unless released.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>

namespace maru {

struct Lease {
  uint64_t id = 0;
  uint64_t session = 0;
  uint64_t ino = 0;
  uint64_t gen = 0;
};

class LeaseTable {
 public:
  // Ids start at a random point so that ids from before a restart (which
  // a client may still release) never name a lease granted after it.
  LeaseTable();
  uint64_t Grant(uint64_t session, uint64_t ino, uint64_t gen);
  // Removes and returns the lease if `session` holds it.
  std::optional<Lease> Take(uint64_t id, uint64_t session);
  const Lease *Find(uint64_t id) const;
  size_t size() const { return leases_.size(); }

 private:
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, Lease> leases_;
};

}  // namespace maru
