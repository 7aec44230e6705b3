// The pool as one client process sees it: every device mapped once, whole,
// shared by all threads, and the translation of a chunk's extents into an
// address. A chunk in one extent is a pointer into the device mapping; one
// split over several extents gets its own view, in which the extents are
// mapped back to back so the bytes are contiguous all the same.
#pragma once

#include <memory>
#include <vector>

#include "alloc/extent.h"
#include "alloc/pool_device.h"
#include "proto/conversions.h"  // FromWire(extents): what Address() takes
#include "proto/maru.pb.h"
#include "util/status.h"

namespace maru {

// A contiguous view of a fragmented chunk; unmapped on destruction.
class ChunkView {
 public:
  ChunkView(uint8_t *base, uint64_t length) : base_(base), length_(length) {}
  ~ChunkView();
  ChunkView(const ChunkView &) = delete;
  ChunkView &operator=(const ChunkView &) = delete;
  uint8_t *data() const { return base_; }

 private:
  uint8_t *base_;
  uint64_t length_;
};

class PoolMap {
 public:
  // Maps every device of the session. Each device is found at the path the
  // server reports and must carry the same device uuid and epoch.
  // `populate` says which mappings are prefaulted (see Populate).
  static Result<std::unique_ptr<PoolMap>> Open(const rpc::OpenSessionReply &session,
                                               Populate populate);

  // The address of a chunk with these extents. For a fragmented chunk a view
  // is made and returned through `view`, which must outlive the address.
  Result<uint8_t *> Address(const ExtentList &extents, std::unique_ptr<ChunkView> *view) const;
  const PoolDevice *device(uint32_t index) const;
  // One past the highest device index (device() of some may be null).
  uint32_t device_slots() const { return static_cast<uint32_t>(devices_.size()); }
  // False when this process may only read the pool (no write permission on
  // a device): it can load chunks but not store them.
  bool writable() const { return writable_; }
  // True when the pool says its hosts' caches are not kept coherent
  // (Coherence::kFlush): writers flush before they publish, readers
  // invalidate before they read (util/cache_flush.h).
  bool flush() const { return flush_; }
  // True if [p, p+len) lies in one device mapping.
  bool Contains(const void *p, uint64_t len) const;
  // True if every extent lies in a mapped device: what a server sends is
  // checked before it is used as an address.
  bool Covers(const ExtentList &extents) const;

 private:
  std::vector<std::unique_ptr<PoolDevice>> devices_;  // by device index
  bool writable_ = true;
  bool flush_ = false;
};

}  // namespace maru
