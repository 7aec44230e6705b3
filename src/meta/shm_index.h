// ShmIndex: the index of sealed chunks that maru-server publishes in shared
// memory for clients to look up, open and release without a message
// (layout: proto/index_layout.h; design: docs/design.md, "The index in
// shared memory"; who may read it: docs/security.md).
//
// The engine tells it what changed, under the engine's lock:
//   Changed(inode)  at the commit of an operation that touched the inode: a
//                   sealed file is entered (or moved, or its mode updated); a
//                   directory that moved or changed mode refreshes its tree;
//   Retiring(gen)   before a version's extents may be freed: the version
//                   leaves the index first (its entry says "ask the server"
//                   until the operation's end: a rewrite puts the new
//                   version there, else Settle() removes it), then
//                   Held(gen) scans the slots.
// Entries are written under a per-entry seqlock; the server is the only
// writer of entries, so the index needs no lock of its own.
#pragma once

#include <sys/stat.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "alloc/pool_device.h"
#include "meta/identity.h"
#include "meta/lease_slots.h"
#include "meta/namespace_tree.h"
#include "proto/index_layout.h"
#include "util/flat_map.h"
#include "util/status.h"

namespace maru {

struct IndexOptions {
  std::string path;                           // empty: next to the pool (see DefaultIndexPath)
  uint64_t entries = 0;                       // 0: twice the pool's units, between 4Ki and 4Mi
  uint32_t regions = index::kDefaultRegions;  // sessions with lease slots at once
  // Regions one uid other than root may hold (0: regions / 4, at least 1),
  // so that one member of the pool's group cannot take them all.
  uint32_t regions_per_uid = 0;
  // The pool's hosts do not keep caches coherent: flush what is written,
  // invalidate what clients wrote before reading it (Coherence::kFlush).
  bool flush = false;
  // The pool's own region for the index (its first device's superblock):
  // when `bytes` is nonzero the index lives there, in the pool mapping that
  // every host shares, instead of in a file only this host sees.
  uint64_t pool_offset = 0, pool_bytes = 0;
};

// `<pool>.index` for a pool file; /dev/shm/maru-<uuid>.index for a device.
std::string DefaultIndexPath(const std::string &pool_path, const std::string &pool_uuid);

class ShmIndex {
 public:
  // Replaces any index at the path (marking the old one dead, so that its
  // readers let go) with an empty one; the file gets the pool file's group
  // and at most its mode (without x): it opens no door the pool does not.
  // With a pool region (options.pool_bytes), the region is emptied and
  // made the index instead: no file, the pool's own permissions. A region
  // too small for the entries and sessions asked for is an error (ENOSPC)
  // that names the flags.
  static Result<std::unique_ptr<ShmIndex>> Create(const IndexOptions &options,
                                                  const std::string &pool_path, uint64_t pool_units,
                                                  const NamespaceTree &tree);
  // Marks the index dead and removes it: clients fall back to messages.
  ~ShmIndex();

  // Enters every sealed file of the tree, then opens the index to readers.
  // `order` (inodes of the tree, each once; best the order they were made
  // in) is visited first: in memory order, with each directory's path made
  // once for its files rather than once a file. The rest of the tree (a
  // root or lost+found made at start) is visited after it.
  void PublishAll(const std::vector<Inode *> &order = {});
  void Changed(const Inode &inode);
  void Retiring(uint64_t gen);
  // At the end of each operation's commit: entries still changing go.
  void Settle();
  // True if a client's lease slot holds `gen` (only versions once in the
  // index can be held: others cost nothing).
  bool Held(uint64_t gen);
  // The uids whose sessions hold `gen` in a lease slot (it left the index).
  std::vector<uint32_t> SlotHolders(uint64_t gen) const {
    return draining_.count(gen) ? slots_.HoldersOf(gen) : std::vector<uint32_t>{};
  }

  // Calls `read(ino, gen)` for each read through the index noted since the
  // last call, oldest first (a note is the client's word: check the gen).
  template <typename F>
  void DrainReads(F &&read) {
    for (const LeaseSlots::Read &r : slots_.DrainReads()) {
      if (r.pos >= layout_.entries) continue;  // the client's word: checked
      index::EntryData e{};
      uint64_t seq;
      index::ReadEntry(entry(r.pos), &e, &seq);
      if ((e.flags & index::kUsed) && e.gen == r.gen) read(e.ino, e.gen);
    }
  }

  // Whether `c` may open the index file to read and write it (as a client
  // does): only such a caller's session is given a region. Regions are few;
  // a uid that cannot use one must not be able to take them all.
  bool MayOpen(const Caller &c) const;
  LeaseSlots::Assigned AssignRegion(uint64_t session, uint32_t uid, uint32_t limit) {
    return slots_.Assign(session, uid, limit);
  }
  void set_regions_per_uid(uint32_t max) { slots_.set_max_per_uid(max); }
  void DropRegion(uint64_t session) { slots_.Drop(session); }
  // The leases `session` holds in its lease slots.
  size_t SlotLeases(uint64_t session) const { return slots_.Held(session); }
  uint32_t slots_per_region() const { return layout_.slots_per_region; }

  // The file clients open; empty when the index is in the pool.
  const std::string &path() const { return path_; }
  bool in_pool() const { return pool_ != nullptr; }
  uint64_t instance() const { return instance_; }
  size_t entries_used() const { return by_gen_.size(); }
  uint64_t overflow() const { return overflow_; }

 private:
  ShmIndex(std::string path, void *base, const index::Layout &layout, uint64_t instance,
           const uint64_t key[2], const NamespaceTree &tree);
  // Create's two places: a new file, or the pool's region.
  static Result<std::unique_ptr<ShmIndex>> CreateFile(const IndexOptions &options,
                                                      const std::string &pool_path,
                                                      const index::Layout &layout,
                                                      const NamespaceTree &tree);
  static Result<std::unique_ptr<ShmIndex>> CreateInPool(const IndexOptions &options,
                                                        const std::string &pool_path,
                                                        const index::Layout &layout,
                                                        const NamespaceTree &tree);
  // Who may use the index (MayOpen): the owner, group and `bits` of the
  // mode in `st` (the file's, or the pool's); and regions a uid may hold.
  void SetAccess(const IndexOptions &options, const struct stat &st, uint32_t bits);
  // A chunk that could not be entered: counted here, and shown to clients.
  void Overflowed();
  // Whether the entry at `pos` holds the version the server put there.
  bool Owns(uint64_t pos, uint64_t gen) const;
  void Publish(const Inode &file);
  // Publish, given the key of the file's path and whether every directory
  // above it lets others search it.
  void Enter(const Inode &file, const uint64_t key[2], bool path_open);
  void RefreshTree(const Inode &dir);
  void Remove(uint64_t pos);
  index::EntryData Describe(const Inode &file, const uint64_t key[2], bool path_open) const;
  index::Entry &entry(uint64_t pos) { return entries_[pos]; }

  std::string path_;
  uint32_t file_uid_ = 0, file_gid_ = 0, file_mode_ = 0;  // the index file's, as made
  void *base_;
  std::unique_ptr<PoolDevice> pool_;  // the pool mapping base_ lies in, if in the pool
  // What the server made, in its own memory: every place in the file is
  // computed from these, never from the header, which the pool's group
  // may write (docs/security.md, "The shared-memory index").
  const index::Layout layout_;
  const uint64_t instance_;
  const uint64_t key_[2];
  uint64_t overflow_ = 0;
  index::Header *header_;  // written, never read back
  index::Entry *entries_;
  const NamespaceTree &tree_;
  LeaseSlots slots_;
  FlatMap<uint64_t> by_gen_;               // version in the index -> its entry (flat:
                                           // one per chunk)
  std::unordered_set<uint64_t> draining_;  // left the index, maybe still in a slot
  std::vector<uint64_t> changing_;         // entries marked kChanging this operation
  struct DirState {
    uint64_t parent;
    uint32_t mode;
    std::string name;
  };
  std::unordered_map<uint64_t, DirState> dirs_;  // what a directory was at its last change
};

}  // namespace maru
