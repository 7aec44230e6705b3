// Errors of the C library as Python exceptions.
#ifndef MARU_PY_ERRORS_H
#define MARU_PY_ERRORS_H

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

namespace maru_py {

// Using a connection in a process forked after it was made. The C library
// says handles do not survive fork(); this is raised instead of touching it.
class ForkError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Raises OSError(errno, message[, path]) for a negative errno. OSError's
// constructor picks the subclass from the errno, as PyErr_SetFromErrno does:
// FileNotFoundError for ENOENT, FileExistsError for EEXIST, PermissionError
// for EACCES/EPERM, and so on. The GIL must be held.
[[noreturn]] void ThrowErrno(int rc, const std::string *path = nullptr);

// The OSError for a negative errno, not raised (batch results).
pybind11::object ErrnoException(int rc, const std::string *path = nullptr);

inline void Check(int rc, const std::string *path = nullptr) {
  if (rc < 0) ThrowErrno(rc, path);
}

// A path (or other text) for the C library, whose strings end at the first
// NUL: one inside would cut it short without a word, so it raises
// ValueError, as os.open() does. The GIL must be held.
const char *CPath(const std::string &s);

void RegisterErrors(pybind11::module_ &m);

}  // namespace maru_py

#endif  // MARU_PY_ERRORS_H
