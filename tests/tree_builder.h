// A NamespaceTree built by hand, for the tests that need one without the
// engine: inodes adopted as the engine's load adopts them, directories
// linked under their parent.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>

#include "meta/namespace_tree.h"

namespace maru {

// A new inode owned by uid 0, adopted by `tree` but linked nowhere.
inline Inode *AdoptInode(NamespaceTree *tree, uint64_t ino, uint64_t parent,
                         const std::string &name, uint32_t mode) {
  auto inode = std::make_unique<Inode>();
  inode->ino = ino;
  inode->parent = parent;
  inode->name = name;
  inode->mode = mode;
  return tree->Adopt(std::move(inode));
}

// A new directory owned by uid 0, linked as `name` under `parent`.
inline Inode *LinkDir(NamespaceTree *tree, uint64_t ino, Inode *parent, const std::string &name,
                      uint32_t perm = 0755) {
  Inode *d = AdoptInode(tree, ino, 0, "", S_IFDIR | perm);
  tree->Link(parent, d, name);
  return d;
}

}  // namespace maru
