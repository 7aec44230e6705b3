// LeaseSlots: the server's side of the index's lease slots (one region of
// slots per session, in the index file; layout in proto/index_layout.h).
//
// A client takes a lease without a message: it writes the generation it
// reads into a free slot of its region, then checks that the index still
// names that generation. The server, after taking a version out of the
// index and before reusing its extents, scans the slots (Holds). Both sides
// order their store before their load (seq_cst), so either the client sees
// the version gone and lets go, or the server sees the slot and waits.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "proto/index_layout.h"

namespace maru {

class LeaseSlots {
 public:
  // `layout` is the server's own copy: nothing is read from the header.
  LeaseSlots(void *base, const index::Layout &layout);

  struct Assigned {
    uint32_t region = 0;  // 1-based; 0: none free (the client leases by message)
    uint64_t token = 0;   // written as the region's owner while the session lives
  };
  // A region for `session` of `uid` (the same one again if it has one),
  // emptied, of which the first `limit` slots hold leases (at most
  // slots_per_region). None when `uid` (not root) holds max_per_uid already.
  Assigned Assign(uint64_t session, uint32_t uid, uint32_t limit);
  // Regions one uid other than root may hold at once (0: no limit).
  void set_max_per_uid(uint32_t max) { max_per_uid_ = max; }
  // Empties the session's region and frees it: its leases end with it.
  void Drop(uint64_t session);
  // True if any assigned region holds `gen` in a slot within its limit.
  bool Holds(uint64_t gen) const;
  // The uids of the sessions whose slots hold `gen` now.
  std::vector<uint32_t> HoldersOf(uint64_t gen) const;
  // The leases `session` holds in its slots now (0 without a region).
  size_t Held(uint64_t session) const;
  size_t assigned() const { return by_session_.size(); }
  // The reads noted in every region since the last call, oldest first (by
  // the clients' stamps): entry position and generation.
  struct Read {
    uint64_t stamp_ns, pos, gen;
  };
  std::vector<Read> DrainReads();

 private:
  struct Assignment {
    uint32_t region;  // 0-based
    uint32_t limit;   // the slots honoured: the client's `limit` word is only its copy
    uint32_t uid;     // whose session it is
  };
  // Ring places read again at each drain: the blocks of a few threads
  // that were taken before the last drain and written after it.
  static constexpr uint64_t kReread = 8 * index::kNoteBlock;
  void Clear(index::Region *r);
  // The slots of `a` that the server reads: a client's `used` word, capped.
  uint64_t Scanned(const Assignment &a, const index::Region *r) const;

  index::Region *At(uint32_t region) const { return index::RegionAt(base_, layout_, region); }

  void *base_;
  const index::Layout layout_;
  std::unordered_map<uint64_t, Assignment> by_session_;
  struct Drained {
    uint64_t from = 0;      // the ring places read up to
    uint64_t stamp_ns = 0;  // the newest note taken (older ones are not new)
  };
  std::unordered_map<uint32_t, Drained> drained_;  // region -> what was taken from its ring
  std::vector<uint32_t> free_;
  std::unordered_map<uint32_t, uint32_t> per_uid_;  // uid -> regions it holds
  uint32_t max_per_uid_ = 0;
};

}  // namespace maru
