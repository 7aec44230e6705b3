// maru._maru: the pybind11 binding of libmaru_direct (maru_direct.h). The
// Python package `maru` builds its API on this module and nothing else.
#include <pybind11/pybind11.h>

#include "batch_io.h"
#include "chunk_handle.h"
#include "connection.h"
#include "errors.h"
#include "prefix.h"

namespace py = pybind11;

PYBIND11_MODULE(_maru, m) {
  m.doc() = "Binding of libmaru_direct; use the maru package instead.";
  maru_py::RegisterErrors(m);
  maru_py::RegisterChunkHandle(m);
  maru_py::RegisterPrefix(m);
  maru_py::RegisterConnection(m);
  maru_py::RegisterBatchIo(m);
  m.attr("CREATE_CONTIGUOUS") = MARU_CREATE_CONTIGUOUS;
  m.attr("HINT_NONE") = static_cast<int>(MARU_HINT_NONE);
  m.attr("HINT_KEEP") = static_cast<int>(MARU_HINT_KEEP);
  m.attr("HINT_DROP") = static_cast<int>(MARU_HINT_DROP);
  m.attr("CHECKSUM_NONE") = static_cast<int>(MARU_CHECKSUM_NONE);
  m.attr("CHECKSUM_XXH3") = static_cast<int>(MARU_CHECKSUM_XXH3);
  m.attr("CHECKSUM_CRC32C") = static_cast<int>(MARU_CHECKSUM_CRC32C);
  m.attr("BATCH_MAX") = MARU_BATCH_MAX;
  m.def(
      "strerror", [](int err) { return std::string(maru_strerror(err)); }, py::arg("err"),
      "maru_strerror(): a description of an errno.");
}
