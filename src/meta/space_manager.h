// Pool space as the server sees it: one ExtentAllocator per device, and the
// rule that no extent is reused while anything may still point into it.
//
// Every version is named by its generation. Leases and writers hold
// references on a generation; when a version leaves the namespace (unlink,
// replace, eviction, abort) it is *retired*: its extents are freed at once if
// nothing references it, else they wait (recorded in RocksDB, so a restart
// does not forget them) until the last reference goes. After a restart the
// server cannot know which leases clients still hold, so for a grace period
// every retired version waits.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>
#include <vector>

#include "alloc/extent_allocator.h"
#include "alloc/superblock.h"
#include "meta/meta_db.h"

namespace maru {

struct Version;

class SpaceManager {
 public:
  struct Device {
    uint32_t index;
    std::string path;
    Superblock superblock;
    ExtentAllocator allocator;
  };

  void AddDevice(uint32_t index, const std::string &path, const Superblock &sb);
  const std::vector<Device> &devices() const { return devices_; }
  const Device *device(uint32_t index) const;

  // Reserves space for `bytes` on the device that fits it best.
  Result<ExtentList> Allocate(uint64_t bytes);
  // Claims extents found in the metadata at start; EINVAL on overlap.
  Status MarkUsed(const ExtentList &extents);
  // Frees extents no one has seen (e.g. trimmed off a reservation).
  void FreeNow(const ExtentList &extents);

  void Ref(uint64_t gen) { ++refs_[gen]; }
  // Drops one reference; frees the version if it was retired and this was
  // the last. Returns the bytes freed.
  uint64_t Unref(uint64_t gen, MetaDb::Batch *batch);
  uint32_t refs(uint64_t gen) const;
  // Readers the server does not count (the index's lease slots, ShmIndex):
  // `retiring` takes a version out of their reach before it is retired,
  // `held` says whether one of them still reads it. A held version is
  // neither freed nor evicted.
  struct OutsideReaders {
    std::function<void(uint64_t gen)> retiring;
    std::function<bool(uint64_t gen)> held;
  };
  void set_outside_readers(OutsideReaders r) { outside_ = std::move(r); }
  // Told each retired version it frees (its readers' charges go with it).
  void set_on_free(std::function<void(uint64_t gen)> f) { on_free_ = std::move(f); }
  // Referenced here or held outside.
  bool in_use(uint64_t gen) const { return refs(gen) > 0 || (outside_.held && outside_.held(gen)); }
  // Retires a version (see above). Returns the bytes freed now. A
  // reservation retired under its writer names the writer, so that the
  // writer's reference survives a restart. `ino` is the file it was a
  // version of (0: none), remembered with it (RetiredIno).
  uint64_t Retire(uint64_t gen, const ExtentList &extents, MetaDb::Batch *batch,
                  const Version *writing = nullptr, uint64_t ino = 0);
  // Takes a retired version back (its references stay): its extents now
  // belong to whoever calls, and its record is deleted.
  ExtentList TakeRetired(uint64_t gen, MetaDb::Batch *batch);
  // A retired version found in the database at start.
  void RestoreRetired(uint64_t gen, const ExtentList &extents, uint64_t ino);
  // The file a retired version was a version of; 0 if none or not retired.
  uint64_t RetiredIno(uint64_t gen) const;
  // Until `mono_ns`, retired versions wait even without references.
  void SetGraceUntil(int64_t mono_ns) { grace_until_ns_ = mono_ns; }
  bool in_grace(int64_t now_ns) const { return now_ns < grace_until_ns_; }
  // Frees waiting versions that no longer need to wait.
  uint64_t Tick(int64_t now_mono_ns, MetaDb::Batch *batch);

  uint64_t unit() const;
  uint64_t capacity() const;
  uint64_t free_bytes() const;
  uint64_t retired_bytes() const { return retired_bytes_; }
  // A copy of every free run, by device, for fsck.
  std::vector<std::map<uint64_t, uint64_t>> FreeMaps() const;
  const std::map<uint64_t, ExtentList> &retired() const { return retired_; }

 private:
  uint64_t FreeRetired(std::map<uint64_t, ExtentList>::iterator it, MetaDb::Batch *batch);
  Device *mutable_device(uint32_t index);

  std::vector<Device> devices_;
  std::unordered_map<uint64_t, uint32_t> refs_;
  std::map<uint64_t, ExtentList> retired_;              // gen -> extents waiting
  std::unordered_map<uint64_t, uint64_t> retired_ino_;  // gen -> its file, where it had one
  uint64_t retired_bytes_ = 0;
  int64_t grace_until_ns_ = 0;
  OutsideReaders outside_;
  std::function<void(uint64_t gen)> on_free_;
};

}  // namespace maru
