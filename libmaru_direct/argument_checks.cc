#include "argument_checks.h"

#include "maru_direct_internal.h"
#include "util/path.h"
#include "util/status.h"

namespace maru::direct {

int CheckPath(const char *path, bool *canonical) {
  if (!path) return -EINVAL;
  size_t names = 0;
  maru::Status s = maru::CheckPathNames(path, &names, canonical);
  if (!s.ok()) return maru::ReturnCode(s);
  return names == 0 ? -EINVAL : 0;  // "/" is no chunk
}

int CheckBatch(const void *items, size_t n) {
  if (!items && n) return -EINVAL;
  return n > MARU_BATCH_MAX ? -E2BIG : 0;
}

}  // namespace maru::direct
