#include "errors.h"

#include "maru_direct.h"

namespace py = pybind11;

namespace maru_py {

py::object ErrnoException(int rc, const std::string *path) {
  const int err = rc < 0 ? -rc : rc;
  py::object os_error = py::reinterpret_borrow<py::object>(PyExc_OSError);
  if (path) return os_error(err, maru_strerror(err), *path);
  return os_error(err, maru_strerror(err));
}

void ThrowErrno(int rc, const std::string *path) {
  py::object exc = ErrnoException(rc, path);
  PyErr_SetObject(reinterpret_cast<PyObject *>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

const char *CPath(const std::string &s) {
  if (s.find('\0') != std::string::npos)
    throw py::value_error("maru: embedded null byte in " +
                          py::repr(py::str(s)).cast<std::string>());
  return s.c_str();
}

void RegisterErrors(py::module_ &m) {
  py::register_exception<ForkError>(m, "ForkError", PyExc_RuntimeError);
}

}  // namespace maru_py
