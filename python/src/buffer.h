// A contiguous buffer of the caller (numpy array, torch CPU tensor,
// memoryview, bytes...) through the buffer protocol.
#ifndef MARU_PY_BUFFER_H
#define MARU_PY_BUFFER_H

#include <pybind11/pybind11.h>

#include <cstdint>

namespace maru_py {

// Holds the view (and so the exporter's memory) until destroyed; the GIL
// must be held to make and to destroy one.
class ContiguousBuffer {
 public:
  ContiguousBuffer(pybind11::handle obj, bool writable) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) < 0) throw pybind11::error_already_set();
  }
  ~ContiguousBuffer() { PyBuffer_Release(&view_); }
  ContiguousBuffer(const ContiguousBuffer &) = delete;
  ContiguousBuffer &operator=(const ContiguousBuffer &) = delete;
  void *data() const { return view_.buf; }
  uint64_t size() const { return static_cast<uint64_t>(view_.len); }

 private:
  Py_buffer view_;
};

}  // namespace maru_py

#endif  // MARU_PY_BUFFER_H
