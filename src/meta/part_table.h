// Layer-wise chunks: readers of a chunk still being written in
// parts, and their waits for the next part.
//
// How many parts a reservation has and how many its writer published live
// in its Version (inode.h). This table holds what outlives the reservation
// for a reader: whether the version it leases (OpenPartial) ended sealed or
// aborted, and the condition its waits sleep on. An entry exists while
// partial-read leases on its generation do, so it is bounded by the
// session's lease limit. Waits are bounded too: per session and in all,
// since each holds a server thread.
//
// Everything here runs under the engine's lock; waits sleep on it.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "util/mutex.h"

namespace maru {

class PartTable {
 public:
  enum class State { kWriting, kSealed, kAborted };
  struct Entry {
    State state = State::kWriting;
    uint32_t leases = 0;  // partial-read leases on the generation
    CondVar changed;      // waits with the engine's Mutex
  };

  static constexpr uint32_t kMaxParts = 4096;
  static constexpr uint32_t kMaxWaitersPerSession = 64;  // EMFILE past it
  // EMFILE past it too: sessions cost nothing, so one uid opening many of
  // them must not take every wait from the others. Root is not counted.
  static constexpr uint32_t kMaxWaitersPerUid = 128;
  static constexpr uint32_t kMaxWaiters = 512;  // ENFILE past it, all sessions
  static constexpr uint32_t kMaxWaitMs = 1000;  // one call; clients call again

  // EINVAL unless `parts` (0 or 1: one) divides `size` and is at most kMaxParts.
  static int CheckParts(uint64_t size, uint32_t parts);

  // A partial-read lease on `gen` was granted / a lease has gone.
  void LeaseGranted(uint64_t lease, uint64_t gen);
  void LeaseGone(uint64_t lease);
  // The entry readers of `gen` wait on; null if no partial lease holds it.
  std::shared_ptr<Entry> Find(uint64_t gen) const;
  // The writer published more parts of `gen`: wakes its readers.
  void Published(uint64_t gen);
  // The reservation `gen` was sealed or dropped (aborted, expired, removed).
  void Ended(uint64_t gen, State state);
  // Whether readers lease the reservation `gen` (its extents must stay whole).
  bool HasReaders(uint64_t gen) const { return entries_.count(gen) != 0; }

  // Counts a wait of `session` of `uid`; a positive errno past the caps.
  int AddWaiter(uint64_t session, uint32_t uid);
  void RemoveWaiter(uint64_t session, uint32_t uid);
  size_t size() const { return entries_.size(); }

 private:
  std::unordered_map<uint64_t, std::shared_ptr<Entry>> entries_;  // gen -> entry
  std::unordered_map<uint64_t, uint64_t> leases_;                 // partial lease -> gen
  std::unordered_map<uint64_t, uint32_t> waiting_;                // session -> waits
  std::unordered_map<uint32_t, uint32_t> waiting_by_uid_;         // uid -> waits
  uint32_t waiters_ = 0;
};

}  // namespace maru
