// What the mode bits let a caller (meta/identity.h) do. The server enforces
// POSIX permissions for every door (library, FUSE, tools) in one place.
#pragma once

#include "meta/identity.h"
#include "meta/inode.h"

namespace maru {

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
