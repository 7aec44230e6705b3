#include "meta/access.h"

namespace maru {

bool MayAccess(const Inode &inode, const Caller &caller, int mask) {
  if (caller.is_root()) {
    // Root passes, except that executing needs some x bit on a non-directory.
    if (!(mask & kMayExec) || inode.is_dir()) return true;
    return (inode.mode & 0111) != 0;
  }
  uint32_t bits;
  if (caller.uid == inode.uid)
    bits = (inode.mode >> 6) & 7;
  else if (caller.InGroup(inode.gid))
    bits = (inode.mode >> 3) & 7;
  else
    bits = inode.mode & 7;
  return (bits & static_cast<uint32_t>(mask)) == static_cast<uint32_t>(mask);
}

bool StickyAllows(const Inode &dir, const Inode &victim, const Caller &caller) {
  if (!(dir.mode & S_ISVTX)) return true;
  return caller.is_root() || caller.uid == dir.uid || caller.uid == victim.uid;
}

bool IsOwnerOrRoot(const Inode &inode, const Caller &caller) {
  return caller.is_root() || caller.uid == inode.uid;
}

}  // namespace maru
