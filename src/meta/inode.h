// In-memory form of a file or directory. The namespace owns inodes; the
// durable form is schema::Inode (meta/records.h), written through MetaDb.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/container/btree_map.h"
#include "alloc/extent.h"
#include "meta/inode_slab.h"
#include "proto/maru.pb.h"

namespace maru {

// One generation of a file's content. Generations are unique across the
// whole server, so a generation names a set of extents unambiguously.
// (Fields ordered so that none pads.)
struct Version {
  uint64_t gen = 0;
  uint64_t size = 0;
  ExtentList extents;
  rpc::ChecksumType checksum_type = rpc::CHECKSUM_NONE;
  uint32_t writer_uid = 0;  // reservations only
  uint64_t checksum = 0;
  uint64_t writer_session = 0;  // reservations only
  uint64_t request_id = 0;      // reservations only
  int64_t created_ns = 0;
  // Layer-wise: written in this many equal parts (0, 1: one; at most
  // PartTable::kMaxParts, so 16 bits: an inode holds a Version inline).
  uint16_t parts = 0;
  uint16_t published = 0;  // reservations only: parts published so far (not persisted)
  // Reservations only: whose quota the space counts for if its file goes
  // while it is written (the caller who made it, whom maru-fuse asserts).
  uint32_t charged_uid = 0;
};

// An optional value kept on the heap: one pointer where it is absent,
// which it is for almost every inode (a reservation being written). Reads
// like std::optional.
template <typename T>
class Boxed {
 public:
  Boxed() = default;
  Boxed(Boxed &&) noexcept = default;
  Boxed &operator=(Boxed &&) noexcept = default;
  Boxed(const Boxed &o) : p_(o.p_ ? std::make_unique<T>(*o.p_) : nullptr) {}
  Boxed &operator=(const Boxed &o) {
    if (this != &o) p_ = o.p_ ? std::make_unique<T>(*o.p_) : nullptr;
    return *this;
  }
  Boxed &operator=(T v) {
    p_ = std::make_unique<T>(std::move(v));
    return *this;
  }
  explicit operator bool() const { return p_ != nullptr; }
  bool has_value() const { return p_ != nullptr; }
  T *operator->() { return p_.get(); }
  const T *operator->() const { return p_.get(); }
  T &operator*() { return *p_; }
  const T &operator*() const { return *p_; }
  void reset() { p_.reset(); }

 private:
  std::unique_ptr<T> p_;
};

// A directory's entries: name -> inode number, in name order. A name is a
// view of the child inode's own `name`, which does not change while it is
// linked (and an Inode never moves), so each name is stored once. A file
// has no entries and pays one pointer for them. A B-tree: its 24-byte
// entries sit side by side in nodes (about 26 bytes an entry when names
// come in order, as a load and most fills bring them) where std::map pays a
// 64-byte heap node each; at ten million chunks, 350 MB less. Its
// iterators do not survive an insert or an erase: nothing here keeps one
// but Near, which each Add that takes it renews.
class DirEntries {
 public:
  using Map = absl::btree_map<std::string_view, uint64_t, std::less<>>;
  using const_iterator = Map::const_iterator;
  using const_reverse_iterator = Map::const_reverse_iterator;

  DirEntries() = default;
  DirEntries(DirEntries &&) noexcept = default;
  DirEntries &operator=(DirEntries &&) noexcept = default;
  DirEntries(const DirEntries &o) : map_(o.map_ ? std::make_unique<Map>(*o.map_) : nullptr) {}
  DirEntries &operator=(const DirEntries &o) {
    if (this != &o) map_ = o.map_ ? std::make_unique<Map>(*o.map_) : nullptr;
    return *this;
  }

  const_iterator begin() const { return map().begin(); }
  const_iterator end() const { return map().end(); }
  const_reverse_iterator rbegin() const { return map().rbegin(); }
  const_reverse_iterator rend() const { return map().rend(); }
  const_iterator find(std::string_view name) const { return map().find(name); }
  const_iterator upper_bound(std::string_view name) const { return map().upper_bound(name); }
  size_t count(std::string_view name) const { return map().count(name); }
  bool empty() const { return map().empty(); }
  size_t size() const { return map().size(); }
  // `name` must view the child's own name (Inode::name).
  void Set(std::string_view name, uint64_t ino) {
    if (!map_) map_ = std::make_unique<Map>();
    auto [it, added] = map_->try_emplace(name, ino);
    if (added) return;
    // The key views the name of the child it named, which may go away.
    map_->erase(it);
    map_->try_emplace(name, ino);
  }
  // Where the last Add of one directory put its name.
  struct Near {
    const void *map = nullptr;
    const_iterator at;
  };
  // Set, unless `name` is taken; false then. Made for a load, without a
  // search from the root where it can: names that come in order (made one
  // after another) go in at the end, and names that come as several
  // ascending runs interleaved (several writers in one directory at once)
  // a few places after the last one added, found among names just compared
  // (in the cache) rather than among keys that point into inodes all over
  // memory. `near` starts empty, is kept by the caller for this directory,
  // and is good until anything else changes the directory.
  bool Add(std::string_view name, uint64_t ino, Near *near) {
    constexpr int kSteps = 8;
    if (!map_) map_ = std::make_unique<Map>();
    Map &m = *map_;
    const_iterator at = m.end();
    if (near->map == &m && near->at != m.end() && near->at->first < name) {
      at = std::next(near->at);
      for (int i = 0; i < kSteps && at != m.end() && at->first < name; ++i) ++at;
    }
    const bool fits = at == m.end() ? m.empty() || m.rbegin()->first < name
                                    : name < at->first && std::prev(at)->first < name;
    if (fits) {
      *near = Near{&m, m.emplace_hint(at, name, ino)};
      return true;
    }
    auto [it, added] = m.try_emplace(name, ino);
    if (added) *near = Near{&m, it};
    return added;
  }
  void erase(const_iterator it) {
    map_->erase(it);
    if (map_->empty()) map_.reset();
  }

 private:
  const Map &map() const {
    static const Map kNone;
    return map_ ? *map_ : kNone;
  }
  std::unique_ptr<Map> map_;
};

// A count in 32 bits that stops at its largest value instead of wrapping
// (4 bytes an inode less than a uint64_t, which with the fields around it
// keeps the inode in a smaller heap block). Reads as a uint64_t.
class SaturatingCount {
 public:
  SaturatingCount &operator++() {
    if (n_ != UINT32_MAX) ++n_;
    return *this;
  }
  SaturatingCount &operator=(uint64_t v) {
    n_ = v > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(v);
    return *this;
  }
  operator uint64_t() const { return n_; }

 private:
  uint32_t n_ = 0;
};

// (Fields ordered so that none pads: this is most of a chunk's memory.
// 232 bytes, in a slot of that size.)
struct Inode {
  uint64_t ino = 0;
  uint64_t parent = 0;
  std::string name;
  uint32_t mode = 0;
  uint32_t uid = 0, gid = 0;
  uint32_t subdirs = 0;  // directories only: for nlink
  int64_t atime_ns = 0, mtime_ns = 0, ctime_ns = 0;
  std::optional<Version> current;  // sealed content
  Boxed<Version> pending;          // reservation being written
  uint64_t parent_chunk = 0;
  int64_t pin_expiry_ns = 0;
  DirEntries children;   // directories only
  SaturatingCount hits;  // opens for reading
  bool pinned = false;

  bool is_dir() const { return S_ISDIR(mode); }
  bool is_file() const { return S_ISREG(mode); }

  // From a slot (inode_slab.h), not malloc: 8 bytes an inode less.
  static void *operator new(size_t size);
  static void operator delete(void *p, size_t size);
};
static_assert(sizeof(Inode) <= 232, "an inode grew: most of a chunk's memory");

// Calls `visit` on each of `inodes` in order, fetching the inode a few
// places ahead from memory meanwhile: a start walks ten million inodes, a
// few times, and each is a cache miss otherwise.
template <typename Inodes, typename Visit>
void ForEachInode(const Inodes &inodes, Visit &&visit) {
  constexpr size_t kAhead = 8;
  const size_t n = inodes.size();
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) {
      const char *ahead = reinterpret_cast<const char *>(&*inodes[i + kAhead]);
      for (size_t at = 0; at < sizeof(Inode); at += 64) __builtin_prefetch(ahead + at);
    }
    visit(inodes[i]);
  }
}

inline SlotArena<sizeof(Inode), alignof(Inode)> &InodeArena() {
  // Never destroyed: inodes may outlive static destructors at exit.
  static auto *arena = new SlotArena<sizeof(Inode), alignof(Inode)>();
  return *arena;
}

inline void *Inode::operator new(size_t size) {
  if (!kInodeSlab || size != sizeof(Inode)) return ::operator new(size);
  return InodeArena().Allocate();
}

inline void Inode::operator delete(void *p, size_t size) {
  if (!p) return;
  if (!kInodeSlab || size != sizeof(Inode)) return ::operator delete(p);
  InodeArena().Release(p);
}

}  // namespace maru
