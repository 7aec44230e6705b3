// The directory tree: inodes by number, names within directories, and the
// resolution of a Ref (path, directory+name, or inode) with the permission
// checks a path walk implies. Purely in memory and not thread-safe: the
// engine serializes access.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "meta/access.h"
#include "meta/inode.h"
#include "meta/inode_table.h"
#include "proto/maru.pb.h"
#include "util/status.h"

namespace maru {

constexpr uint64_t kRootIno = 1;
// The most levels below the root a directory may lie: as deep as a path
// reaches ("/a" a level in kMaxPathLength bytes). Deeper, no path names a
// directory, and the walks that follow parents get long: mkdir and rename
// refuse with ENAMETOOLONG.
constexpr uint32_t kMaxDepth = 2047;

// EPERM for a Ref by inode number from a caller that may not address by it.
Status MayAddressByIno(const rpc::Ref &ref, const Caller &caller);

class NamespaceTree {
 public:
  // Creates a missing directory during a walk (mkdir -p); supplied by the
  // engine, which also persists it.
  using MakeDir = std::function<Result<Inode *>(Inode *parent, const std::string &name)>;

  struct ParentAndName {
    Inode *dir = nullptr;
    std::string name;
  };

  Inode *Find(uint64_t ino) const;
  Inode *root() const { return Find(kRootIno); }
  Inode *Child(const Inode &dir, std::string_view name) const;
  size_t size() const { return inodes_.size(); }
  // Room for `n` inodes (at start, before adopting them all).
  void Reserve(size_t n) { inodes_.Reserve(n); }

  // Takes ownership without linking it under a name.
  Inode *Adopt(std::unique_ptr<Inode> inode);
  // Gives the inode up; it must already be unlinked.
  std::unique_ptr<Inode> Release(uint64_t ino);
  // Puts `child` under `dir` as `name`.
  void Link(Inode *dir, Inode *child, const std::string &name);
  // Takes `child` out of its directory.
  void Unlink(Inode *child);
  // Rebuilds every directory's entries from the inodes' parent and name,
  // after a load. Inodes whose parent is missing are returned.
  std::vector<Inode *> LinkAll();
  // The same, taking the inodes in the order given (every inode of the tree
  // but the root, each once): the order they were made in visits memory in
  // order and names mostly in order, several times faster than table order.
  std::vector<Inode *> LinkAll(const std::vector<Inode *> &inodes);

  // The inode `ref` names. Searching a directory needs exec permission, on
  // every directory from the root down, also for a ref by inode number.
  Result<Inode *> Resolve(const rpc::Ref &ref, const Caller &caller) const;
  // The directory that holds (or would hold) what `ref` names, and the
  // name. With `make_dir`, missing directories on the way are created.
  Result<ParentAndName> ResolveParent(const rpc::Ref &ref, const Caller &caller,
                                      const MakeDir &make_dir = nullptr) const;

  std::string PathOf(const Inode &inode) const;
  // Levels below the root (the root: 0; at most kMaxDepth + 1 counted).
  uint32_t Depth(const Inode &inode) const;
  // Levels of directories below `dir` (0: it has none), without recursion.
  uint32_t Height(const Inode &dir) const;
  // True if `ancestor` is `inode` or lies on its way to the root.
  bool IsAncestor(const Inode &ancestor, const Inode &inode) const;

  template <typename F>
  void ForEach(F &&f) const {
    inodes_.ForEach(f);
  }

 private:
  Result<Inode *> Walk(Inode *dir, const std::vector<std::string_view> &names, size_t count,
                       const Caller &caller, const MakeDir &make_dir) const;
  Result<Inode *> SearchableDir(uint64_t ino, const Caller &caller) const;
  // EACCES unless `caller` may search every directory above `inode`.
  Status Reachable(const Inode &inode, const Caller &caller) const;

  InodeTable inodes_;
};

}  // namespace maru
