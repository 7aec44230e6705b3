// Who is asking, and what the mode bits let them do. The server enforces
// POSIX permissions for every door (library, FUSE, tools) in one place.
#pragma once

#include <cstdint>
#include <vector>

#include "meta/inode.h"

namespace maru {

struct Caller {
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;
  uint32_t pid = 0;

  bool is_root() const { return uid == 0; }
  bool InGroup(uint32_t g) const;
};

constexpr int kMayRead = 4;
constexpr int kMayWrite = 2;
constexpr int kMayExec = 1;

// True if `caller` may access `inode` for every bit of `mask`.
bool MayAccess(const Inode &inode, const Caller &caller, int mask);
// Sticky directories let only the owner of the entry (or of the directory,
// or root) remove or rename it.
bool StickyAllows(const Inode &dir, const Inode &victim, const Caller &caller);
bool IsOwnerOrRoot(const Inode &inode, const Caller &caller);

}  // namespace maru
