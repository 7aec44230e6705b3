#include "meta/namespace_tree.h"

#include <algorithm>

#include "util/path.h"

namespace maru {

Inode *NamespaceTree::Find(uint64_t ino) const {
  return inodes_.Find(ino);
}

Inode *NamespaceTree::Child(const Inode &dir, std::string_view name) const {
  auto it = dir.children.find(name);
  return it == dir.children.end() ? nullptr : Find(it->second);
}

Inode *NamespaceTree::Adopt(std::unique_ptr<Inode> inode) {
  return inodes_.Insert(std::move(inode));
}

std::unique_ptr<Inode> NamespaceTree::Release(uint64_t ino) {
  return inodes_.Take(ino);
}

void NamespaceTree::Link(Inode *dir, Inode *child, const std::string &name) {
  child->parent = dir->ino;
  child->name = name;
  dir->children.Set(child->name, child->ino);
  if (child->is_dir()) ++dir->subdirs;
}

void NamespaceTree::Unlink(Inode *child) {
  if (Inode *dir = Find(child->parent)) {
    auto it = dir->children.find(child->name);
    if (it != dir->children.end() && it->second == child->ino) {
      dir->children.erase(it);
      if (child->is_dir()) --dir->subdirs;
    }
  }
}

std::vector<Inode *> NamespaceTree::LinkAll() {
  std::vector<Inode *> all;
  all.reserve(inodes_.size());
  inodes_.ForEach([&](Inode &inode) { all.push_back(&inode); });
  return LinkAll(all);
}

std::vector<Inode *> NamespaceTree::LinkAll(const std::vector<Inode *> &inodes) {
  std::vector<Inode *> orphans;
  Inode *dir = nullptr;  // the last one: siblings mostly come together
  DirEntries::Near near;
  ForEachInode(inodes, [&](Inode *inode) {
    if (inode->ino == kRootIno) return;
    if (!dir || dir->ino != inode->parent) {
      dir = Find(inode->parent);
      near = {};
    }
    if (!dir || !dir->is_dir() || !dir->children.Add(inode->name, inode->ino, &near))
      return orphans.push_back(inode);
    if (inode->is_dir()) ++dir->subdirs;
  });
  return orphans;
}

Result<Inode *> NamespaceTree::SearchableDir(uint64_t ino, const Caller &caller) const {
  Inode *dir = Find(ino);
  if (!dir) return Status::Error(ESTALE, "no such directory inode");
  if (!dir->is_dir()) return Status::Error(ENOTDIR);
  if (!MayAccess(*dir, caller, kMayExec)) return Status::Error(EACCES);
  MARU_RETURN_IF_ERROR(Reachable(*dir, caller));
  return dir;
}

// A request that names an inode by number skips the walk from the root
// that a path takes: it is checked as that walk would have been, so that
// knowing (or having cached) an inode number opens nothing a path would
// not. Stricter than POSIX for a process whose working directory lies
// below a directory closed since, which may go on from there on Linux.
Status NamespaceTree::Reachable(const Inode &inode, const Caller &caller) const {
  if (caller.is_root()) return Status::Ok();
  for (const Inode *at = &inode; at->ino != kRootIno;) {
    const Inode *up = Find(at->parent);
    if (!up) return Status::Ok();  // an orphan being cleaned up: no way to it
    if (!MayAccess(*up, caller, kMayExec)) return Status::Error(EACCES);
    at = up;
  }
  return Status::Ok();
}

Result<Inode *> NamespaceTree::Walk(Inode *dir, const std::vector<std::string_view> &names,
                                    size_t count, const Caller &caller,
                                    const MakeDir &make_dir) const {
  for (size_t i = 0; i < count; ++i) {
    if (!dir->is_dir()) return Status::Error(ENOTDIR);
    if (!MayAccess(*dir, caller, kMayExec)) return Status::Error(EACCES);
    Inode *next = Child(*dir, names[i]);
    if (!next) {
      if (!make_dir) return Status::Error(ENOENT);
      Result<Inode *> made = make_dir(dir, std::string(names[i]));
      if (!made.ok()) return made.status();
      next = *made;
    }
    dir = next;
  }
  return dir;
}

// An inode number skips the search permission of the directories above it
// (maru-fuse had the kernel check them): root and the mount daemon only.
Status MayAddressByIno(const rpc::Ref &ref, const Caller &caller) {
  if (ref.ino() == 0 || caller.MayAddressInodes()) return Status::Ok();
  return Status::Error(EPERM, "only root addresses by inode number");
}

Result<Inode *> NamespaceTree::Resolve(const rpc::Ref &ref, const Caller &caller) const {
  if (!ref.path().empty()) {
    thread_local std::vector<std::string_view> names;
    MARU_RETURN_IF_ERROR(SplitPathViews(ref.path(), &names));
    return Walk(root(), names, names.size(), caller, nullptr);
  }
  MARU_RETURN_IF_ERROR(MayAddressByIno(ref, caller));
  if (!ref.name().empty()) {
    MARU_RETURN_IF_ERROR(ValidateName(ref.name()));
    Result<Inode *> dir = SearchableDir(ref.ino(), caller);
    if (!dir.ok()) return dir.status();
    Inode *child = Child(**dir, ref.name());
    if (!child) return Status::Error(ENOENT);
    return child;
  }
  Inode *inode = Find(ref.ino() ? ref.ino() : kRootIno);
  if (!inode) return Status::Error(ESTALE, "no such inode");
  MARU_RETURN_IF_ERROR(Reachable(*inode, caller));
  return inode;
}

Result<NamespaceTree::ParentAndName> NamespaceTree::ResolveParent(const rpc::Ref &ref,
                                                                  const Caller &caller,
                                                                  const MakeDir &make_dir) const {
  if (!ref.path().empty()) {
    std::vector<std::string_view> names;
    MARU_RETURN_IF_ERROR(SplitPathViews(ref.path(), &names));
    if (names.empty()) return Status::Error(EEXIST, "the root directory");
    Result<Inode *> dir = Walk(root(), names, names.size() - 1, caller, make_dir);
    if (!dir.ok()) return dir.status();
    if (!(*dir)->is_dir()) return Status::Error(ENOTDIR);
    return ParentAndName{*dir, std::string(names.back())};
  }
  if (ref.name().empty()) return Status::Error(EINVAL, "a name is needed");
  MARU_RETURN_IF_ERROR(ValidateName(ref.name()));
  MARU_RETURN_IF_ERROR(MayAddressByIno(ref, caller));
  Inode *dir = Find(ref.ino());
  if (!dir) return Status::Error(ESTALE, "no such directory inode");
  if (!dir->is_dir()) return Status::Error(ENOTDIR);
  MARU_RETURN_IF_ERROR(Reachable(*dir, caller));
  return ParentAndName{dir, ref.name()};
}

std::string NamespaceTree::PathOf(const Inode &inode) const {
  std::vector<const std::string *> names;
  const Inode *at = &inode;
  while (at && at->ino != kRootIno) {
    names.push_back(&at->name);
    at = Find(at->parent);
  }
  if (names.empty()) return "/";
  std::string path;
  for (auto it = names.rbegin(); it != names.rend(); ++it) path += "/" + **it;
  return path;
}

uint32_t NamespaceTree::Depth(const Inode &inode) const {
  uint32_t depth = 0;
  for (const Inode *at = &inode; at && at->ino != kRootIno && depth <= kMaxDepth;
       at = Find(at->parent))
    ++depth;
  return depth;
}

uint32_t NamespaceTree::Height(const Inode &dir) const {
  // Depth first, on a stack of its own: the tree is the users' to shape.
  uint32_t height = 0;
  std::vector<std::pair<const Inode *, uint32_t>> todo{{&dir, 0}};
  while (!todo.empty()) {
    auto [at, level] = todo.back();
    todo.pop_back();
    height = std::max(height, level);
    if (at->subdirs == 0) continue;
    for (const auto &[name, ino] : at->children)
      if (const Inode *child = Find(ino); child && child->is_dir())
        todo.emplace_back(child, level + 1);
  }
  return height;
}

bool NamespaceTree::IsAncestor(const Inode &ancestor, const Inode &inode) const {
  const Inode *at = &inode;
  while (at) {
    if (at->ino == ancestor.ino) return true;
    if (at->ino == kRootIno) return false;
    at = Find(at->parent);
  }
  return false;
}

}  // namespace maru
