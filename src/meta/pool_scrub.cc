#include "meta/pool_scrub.h"

#include "alloc/pool_device.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "util/mutex.h"

#include "util/cache_flush.h"

namespace maru {
namespace {

// Each pool device mapped once, for as long as the server runs (as every
// client maps it): mapping an extent per call would fault its pages in
// again each time.
Result<PoolDevice *> DeviceMapping(const std::string &path) {
  static Mutex mu;
  static std::map<std::string, std::unique_ptr<PoolDevice>> devices GUARDED_BY(mu);
  MutexLock lock(&mu);
  std::unique_ptr<PoolDevice> &d = devices[path];
  if (!d) {
    Result<std::unique_ptr<PoolDevice>> opened = PoolDevice::Open(path, {});
    if (!opened.ok()) return opened.status();
    d = std::move(*opened);
  }
  return d.get();
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
  Result<PoolDevice *> d = DeviceMapping(path);
  if (!d.ok()) return d.status();
  if (offset > (*d)->mapped_bytes() || length > (*d)->mapped_bytes() - offset)
    return Status::Error(EINVAL, "an extent past the end of its device");
  memset((*d)->base() + offset, 0, length);
  // The writer may be on another host, which reads memory, not our caches.
  if ((*d)->superblock().coherence == Coherence::kFlush) FlushRange((*d)->base() + offset, length);
  return Status::Ok();
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
