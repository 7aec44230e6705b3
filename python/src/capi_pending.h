// Calls maru_direct.h declares whose implementation is landing on branch
// capi. Weak references let this module load against a library without
// them; the methods that need one raise NotImplementedError naming it.
// TEMPORARY: removed once capi is merged.
#ifndef MARU_PY_CAPI_PENDING_H
#define MARU_PY_CAPI_PENDING_H

#include <pybind11/pybind11.h>

#include "maru_direct.h"

#pragma weak maru_connect_ex
#pragma weak maru_create_batch
#pragma weak maru_seal_batch
#pragma weak maru_alloc
#pragma weak maru_publish
#pragma weak maru_count_prefix
#pragma weak maru_pin_batch
#pragma weak maru_unpin_batch
#pragma weak maru_unlink_batch
#pragma weak maru_pool_regions

#define MARU_REQUIRE(fn)                                                                    \
  do {                                                                                      \
    if (!&fn) {                                                                             \
      PyErr_SetString(PyExc_NotImplementedError,                                            \
                      "maru: libmaru_direct does not implement " #fn " yet (branch capi)"); \
      throw pybind11::error_already_set();                                                  \
    }                                                                                       \
  } while (0)

namespace maru_py {

// The names of the pending calls this library lacks.
inline pybind11::tuple PendingCalls() {
  pybind11::list out;
#define MARU_PENDING_NAME(fn) \
  if (!&fn) out.append(#fn);
  MARU_PENDING_NAME(maru_connect_ex)
  MARU_PENDING_NAME(maru_create_batch)
  MARU_PENDING_NAME(maru_seal_batch)
  MARU_PENDING_NAME(maru_alloc)
  MARU_PENDING_NAME(maru_publish)
  MARU_PENDING_NAME(maru_count_prefix)
  MARU_PENDING_NAME(maru_pin_batch)
  MARU_PENDING_NAME(maru_unpin_batch)
  MARU_PENDING_NAME(maru_unlink_batch)
  MARU_PENDING_NAME(maru_pool_regions)
#undef MARU_PENDING_NAME
  return pybind11::tuple(out);
}

}  // namespace maru_py

#endif  // MARU_PY_CAPI_PENDING_H
