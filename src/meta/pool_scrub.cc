#include "meta/pool_scrub.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace maru {
namespace {

// Clears the range through a mapping of it, populated at once (one fault
// per page would cost more than the clearing). Extents are unit-aligned,
// so the range is page-aligned.
Status ClearMapped(int fd, uint64_t offset, uint64_t length) {
  void *p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
                 static_cast<off_t>(offset));
  if (p == MAP_FAILED) return Status::Error(errno, "mapping an extent to zero it");
  memset(p, 0, length);
  munmap(p, length);
  return Status::Ok();
}

}  // namespace

bool MayMapPool(const std::string &path, const Caller &c) {
  if (c.is_root()) return true;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return false;
  const mode_t rw = c.uid == st.st_uid     ? (st.st_mode >> 6) & 6
                    : c.InGroup(st.st_gid) ? (st.st_mode >> 3) & 6
                                           : st.st_mode & 6;
  return rw == 6;
}

Status ZeroRange(const std::string &path, uint64_t offset, uint64_t length) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return Status::Error(errno, "opening the pool to zero an extent");
  Status s = ClearMapped(fd, offset, length);
  close(fd);
  return s;
}

Status ScrubForWriter(const SpaceManager &space, const Caller &c, const ExtentList &extents) {
  for (const Extent &e : extents) {
    const SpaceManager::Device *d = space.device(e.device);
    if (!d) return Status::Error(EINVAL, "an extent on no device");
    if (MayMapPool(d->path, c)) continue;
    MARU_RETURN_IF_ERROR(ZeroRange(d->path, e.offset, e.length));
  }
  return Status::Ok();
}

}  // namespace maru
