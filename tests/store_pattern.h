// Stores a sealed chunk holding its key's pattern (pattern.h) through
// libmaru_direct: the common first step of the direct-API tests.
#pragma once

#include <cstdint>
#include <string>

#include "maru_direct.h"
#include "pattern.h"

namespace maru_test {

// 0, or the negative errno of the create or the seal.
inline int StorePattern(maru_t *m, const std::string &path, uint64_t size) {
  maru_chunk_t *c;
  int rc = maru_create(m, path.c_str(), size, &c);
  if (rc) return rc;
  FillPattern(maru_chunk_data(c), size, path);
  rc = maru_seal(c);
  maru_release(c);
  return rc;
}

}  // namespace maru_test
