// Stores a sealed chunk holding its key's pattern (pattern.h) through
// libmaru_direct, and loads it back in place: the common steps of the
// direct-API tests.
#pragma once

#include <cstdint>
#include <string>

#include "harness.h"
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

// 0 if the chunk holds its key's pattern, is `size` long and lies in the
// mapping of `pool`: a load in place. Else the open's negative errno, or
// 101 (size), 102 (bytes), 103 (not in the pool).
inline int LoadPattern(maru_t *m, const std::string &path, uint64_t size, const std::string &pool) {
  maru_chunk_t *c;
  int rc = maru_open(m, path.c_str(), &c);
  if (rc) return rc;
  if (maru_chunk_size(c) != size)
    rc = 101;
  else if (!CheckPattern(maru_chunk_data(c), size, path))
    rc = 102;
  else if (!MappedFrom(maru_chunk_data(c), size, pool))
    rc = 103;
  maru_release(c);
  return rc;
}

}  // namespace maru_test
