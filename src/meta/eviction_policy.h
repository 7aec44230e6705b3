// Which sealed chunk to evict next. The Evictor tells the policy when
// chunks are sealed, read and go away; the policy orders them. Whether a
// chunk may be evicted at all (pins, leases, open handles) is the
// Evictor's call, passed in as a predicate. Policies that care which
// chunks extend which read the ChunkChains they were made with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "meta/chunk_chains.h"
#include "util/status.h"

namespace maru {

// What a client says of a chunk's future (maru_hint(); the values are the
// wire format and MARU_HINT_*). A hint may only reorder chunks: no policy
// may keep a chunk out of its order for one.
enum class RetentionHint : uint8_t {
  kNone = 0,  // no hint: forget an earlier one
  kKeep = 1,  // a reader is expected (its conversation is open)
  kDrop = 2,  // no reader is expected (its conversation ended)
};
constexpr uint32_t kRetentionHintMax = 2;

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  // A chunk was sealed: a new one, or a new version of one already known
  // (which counts as a use). A chunk whose parent changes is removed
  // before and inserted again after.
  virtual void OnInsert(uint64_t ino) = 0;
  virtual void OnAccess(uint64_t ino) = 0;
  virtual void OnRemove(uint64_t ino) = 0;
  // A client's hint on a sealed chunk; policies that take none ignore it.
  virtual void OnHint(uint64_t ino, RetentionHint hint) {
    (void)ino;
    (void)hint;
  }
  // Offers chunks to `visit` in eviction order until it returns false;
  // false if it did. A chunk may be offered twice. Choosing several
  // victims in one walk gives what repeated Victim calls, each leaving out
  // those chosen before, would give while nothing changes: a walk costs
  // O(chunks passed), where repeated calls cost O(victims x chunks).
  virtual bool InOrder(const std::function<bool(uint64_t)> &visit) const = 0;
  // The next chunk to evict among those `evictable` accepts; 0 if none.
  uint64_t Victim(const std::function<bool(uint64_t)> &evictable) const;
  // Leaves `ino` out of InOrder until UnparkAll. For a chunk one eviction
  // found it may not take: whether a chunk may go does not change while an
  // eviction runs, so the rest of it need not walk past that chunk again,
  // and each victim costs O(log n) however many chunks are held.
  // A parked chunk also comes back when it is used or sealed again.
  virtual void Park(uint64_t ino) = 0;
  virtual void UnparkAll() = 0;
  // Puts one parked chunk back in its place: the Evictor parks chunks that
  // may not go (leased, pinned, being rewritten) for as long as that holds,
  // so that no eviction walks past them. A policy that cannot put back one
  // chunk alone may put back all; the Evictor parks again what it meets.
  virtual void Unpark(uint64_t ino) {
    (void)ino;
    UnparkAll();
  }
  // Room for `chunks` without growing: a start restores millions, and
  // each growth of a table moves every entry in it again.
  virtual void Reserve(size_t chunks) { (void)chunks; }
  // Whether evicting a chunk also evicts the chunks that extend it.
  virtual bool EvictsDescendants() const = 0;
  virtual const char *name() const = 0;
};

// The names MakeEvictionPolicy knows.
std::vector<std::string> EvictionPolicyNames();

// "frequency" (or its old name with hints, "hinted"), "lru" or "prefix";
// EINVAL for anything else. `chains` must outlive the policy.
Result<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(const std::string &name,
                                                           const ChunkChains &chains);

}  // namespace maru
