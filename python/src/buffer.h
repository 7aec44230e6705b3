// A contiguous buffer of the caller (numpy array, torch CPU tensor,
// memoryview, bytes...) through the buffer protocol.
#ifndef MARU_PY_BUFFER_H
#define MARU_PY_BUFFER_H

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

namespace maru_py {

// Holds the view (and so the exporter's memory) until destroyed; the GIL
// must be held to make and to destroy one. Objects without the buffer
// protocol that are torch tensors (anything with data_ptr(), numel(),
// element_size(), is_contiguous() and a "cpu" device) are taken by their
// data pointer, and held by reference.
class ContiguousBuffer {
 public:
  ContiguousBuffer(pybind11::handle obj, bool writable) {
    if (!PyObject_CheckBuffer(obj.ptr()) && pybind11::hasattr(obj, "data_ptr")) {
      TakeTensor(obj);
      return;
    }
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) < 0) throw pybind11::error_already_set();
    has_view_ = true;
    data_ = view_.buf;
    size_ = static_cast<uint64_t>(view_.len);
  }
  ~ContiguousBuffer() {
    if (has_view_) PyBuffer_Release(&view_);
  }
  ContiguousBuffer(const ContiguousBuffer &) = delete;
  ContiguousBuffer &operator=(const ContiguousBuffer &) = delete;
  void *data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  void TakeTensor(pybind11::handle t) {
    if (pybind11::str(t.attr("device").attr("type")).cast<std::string>() != "cpu")
      throw pybind11::value_error("maru: a tensor buffer must be on the CPU");
    if (!t.attr("is_contiguous")().cast<bool>())
      throw pybind11::value_error("maru: a tensor buffer must be contiguous");
    tensor_ = pybind11::reinterpret_borrow<pybind11::object>(t);
    data_ = reinterpret_cast<void *>(t.attr("data_ptr")().cast<uintptr_t>());
    size_ = t.attr("numel")().cast<uint64_t>() * t.attr("element_size")().cast<uint64_t>();
  }

  Py_buffer view_{};
  bool has_view_ = false;
  pybind11::object tensor_;  // a tensor taken by its data pointer
  void *data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace maru_py

#endif  // MARU_PY_BUFFER_H
