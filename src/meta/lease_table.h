// Read leases: a lease keeps one generation of one file from being reused
// while a reader may still point into it. Leases belong to a session and
// live as long as it does (heartbeats renew them all) unless released.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace maru {

struct Lease {
  uint64_t id = 0;
  uint64_t session = 0;
  uint64_t ino = 0;
  uint64_t gen = 0;
  uint32_t uid = 0;  // whom it was granted for: the session's, or maru-fuse's caller
};

class LeaseTable {
 public:
  // Ids start at a random point so that ids from before a restart (which
  // a client may still release) never name a lease granted after it.
  LeaseTable();
  uint64_t Grant(uint64_t session, uint64_t ino, uint64_t gen, uint32_t uid);
  // Removes and returns the lease if `session` holds it.
  std::optional<Lease> Take(uint64_t id, uint64_t session);
  const Lease *Find(uint64_t id) const;
  size_t size() const { return leases_.size(); }
  // The uids holding a lease on `gen`, and how many `uid` holds: a version
  // retired while read is charged to its readers (QuotaTable::HoldRead).
  std::vector<uint32_t> Holders(uint64_t gen) const;
  uint32_t Held(uint64_t gen, uint32_t uid) const;

 private:
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, Lease> leases_;
  std::unordered_map<uint64_t, std::unordered_map<uint32_t, uint32_t>> by_gen_;  // gen -> uid -> n
};

}  // namespace maru
