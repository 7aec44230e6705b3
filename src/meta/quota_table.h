// Quotas: how much of the pool (and how many pins) a directory tree or a
// uid may hold, so one tenant cannot take the pool from the others.
//
// A chunk's footprint is the space of its reservation plus that of its
// sealed version (whole allocation units, as allocated). A version retired
// while someone still reads it counts for each uid that holds it (a lease,
// or a lease slot of the index) until that uid lets go, and for a quota on
// the root directory: whoever keeps pool space keeps its charge, and cannot
// escape it (a uid reading its own removed files held the whole pool).
//
// The table is charged per chunk: Update() compares a chunk's footprint
// with what it was charged last and moves the difference onto every
// quota'd directory above it and onto its owner's uid quota. Only chunks
// that some quota covers are remembered, so with no quotas an update costs
// one test. Usage is never stored: Recompute() rebuilds it from the
// inodes at start and whenever quotas or the tree's shape change.
//
// Space a writer holds outside the namespace is charged too (Hold): an
// allocation not yet published (maru_alloc), and a reservation whose file
// was removed while it was being written. It is under no directory, so it
// counts for the writer's uid and for a quota on the root directory (which
// covers the whole namespace), until it is published, aborted or its
// session ends (Unhold). Publishing moves it: uncharged here, then checked
// and charged where it is named.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "meta/namespace_tree.h"
#include "meta/schema.pb.h"
#include "proto/maru.pb.h"
#include "util/status.h"

namespace maru {

class QuotaTable {
 public:
  struct Limit {
    uint64_t bytes = 0;  // 0: no limit on bytes
    uint64_t pins = 0;   // 0: no limit on pins
  };
  struct Usage {
    uint64_t bytes = 0;
    uint64_t pins = 0;
  };

  explicit QuotaTable(const NamespaceTree &tree) : tree_(tree) {}

  bool empty() const { return dirs_.empty() && uids_.empty(); }

  // Sets (or, with both limits 0, removes) a quota, then recomputes usage.
  void SetDir(uint64_t ino, Limit limit);
  void SetUid(uint32_t uid, Limit limit);
  // Adopts the quotas the database remembers (directories that no longer
  // exist are dropped) and computes usage.
  // `unit` is the pool's allocation unit: requests are checked as allocated.
  void Load(const std::vector<schema::Quota> &records, uint64_t unit);

  // EDQUOT if `bytes` more, held under `dir` by `uid`, would pass a limit.
  Status MayReserve(const Inode &dir, uint32_t uid, uint64_t bytes) const;
  // ... `bytes` more for `file`, under its directory and owner.
  Status MayGrow(const Inode &file, uint64_t bytes) const;
  // ... `bytes` more for a file to be made at `path` (missing directories
  // of the path are under the deepest one that exists).
  Status MayReserveAt(std::string_view path, uint32_t uid, uint64_t bytes) const;
  // EDQUOT if renaming `src` from directory `from` into `to` (replacing or,
  // with `exchange`, trading places with `dst`) would pass a directory's
  // limit: what moves counts where it lands, before anything moves.
  Status MayMove(const Inode &src, const Inode &from, const Inode &to, const Inode *dst,
                 bool exchange) const;
  // EDQUOT if pinning `file` would pass a pin limit.
  Status MayPin(const Inode &file) const;
  // Charges `file`'s footprint now (call after its versions, owner or pin changed).
  void Update(const Inode &file);
  // Uncharges a file that leaves the namespace.
  void Forget(uint64_t ino);
  // Charges `bytes` (whole units) that `uid` writes under no name, by the
  // generation that holds them; Unhold() gives them back (no-op if unknown).
  // Kept whether or not a quota applies now, so that one set later counts them.
  void Hold(uint64_t gen, uint32_t uid, uint64_t bytes);
  void Unhold(uint64_t gen);
  // Charges `bytes` of the retired version `gen` to `uid`, a reader that
  // still holds it (once per uid); UnholdRead() when that uid holds it no
  // more, DropReads() when it is freed.
  void HoldRead(uint64_t gen, uint32_t uid, uint64_t bytes);
  void UnholdRead(uint64_t gen, uint32_t uid);
  void DropReads(uint64_t gen);
  // After a rename of `a` (and, for an exchange, `b`): a moved file is
  // charged again; a moved directory makes every charge be recomputed.
  void Moved(const Inode &a, const Inode *b);
  // Rebuilds every usage from the tree.
  void Recompute();

  // Every quota with its usage, directories by path.
  void Fill(google::protobuf::RepeatedPtrField<rpc::QuotaInfo> *out) const;
  // The durable form of a quota.
  static schema::Quota DirRecord(uint64_t ino, Limit limit);
  static schema::Quota UidRecord(uint32_t uid, Limit limit);

 private:
  struct Entry {
    Limit limit;
    Usage used;
  };
  struct Charge {
    uint64_t bytes = 0;
    bool pinned = false;
    uint32_t uid = 0;
    bool by_uid = false;
    std::vector<uint64_t> dirs;  // the quota'd directories above it
  };
  static uint64_t Footprint(const Inode &file);
  // What the files at and under `top` hold, without recursion.
  Usage Subtree(const Inode &top) const;
  // The quota'd directories at or above `dir`.
  std::vector<uint64_t> QuotaDirs(const Inode &dir) const;
  void Apply(const Charge &c, int sign);
  // What space held under no name (see Hold) is charged to.
  Charge HeldCharge(uint32_t uid, uint64_t bytes) const;

  const NamespaceTree &tree_;
  uint64_t unit_ = 1;
  std::map<uint64_t, Entry> dirs_;  // by directory ino
  std::map<uint32_t, Entry> uids_;
  std::unordered_map<uint64_t, Charge> charged_;  // by file ino
  std::unordered_map<uint64_t, Charge> held_;     // by generation, see Hold
  std::unordered_map<uint64_t, std::unordered_map<uint32_t, Charge>> reads_;  // gen -> uid
};

}  // namespace maru
