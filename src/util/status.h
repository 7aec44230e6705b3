// Status and Result: errors as values. A Status is an errno (0 = ok) plus an
// optional human message; it crosses no module boundary as an exception.
#pragma once

#include <cerrno>
#include <optional>
#include <string>
#include <utility>

namespace maru {

class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(int errnum, std::string message = {}) {
    return Status(errnum == 0 ? EIO : errnum, std::move(message));
  }

  bool ok() const { return errnum_ == 0; }
  // Positive errno; 0 when ok.
  int errnum() const { return errnum_; }
  const std::string &message() const { return message_; }
  // "message (strerror)" or "strerror" alone.
  std::string ToString() const;

 private:
  Status(int errnum, std::string message) : errnum_(errnum), message_(std::move(message)) {}
  int errnum_ = 0;
  std::string message_;
};

// A value or the Status explaining its absence.
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {
    if (status_.ok()) status_ = Status::Error(EIO, "Result built from an ok Status");
  }

  bool ok() const { return value_.has_value(); }
  const Status &status() const { return status_; }
  T &value() { return *value_; }
  const T &value() const { return *value_; }
  T &operator*() { return *value_; }
  const T &operator*() const { return *value_; }
  T *operator->() { return &*value_; }
  const T *operator->() const { return &*value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

// The two directions across the C boundary, where errors are negative errno
// return codes: a Status as a return code (0 when ok), and a return code
// (negative errno, or 0) as a Status.
inline int ReturnCode(const Status &s) {
  return -s.errnum();
}
inline Status FromReturnCode(int rc, std::string message = {}) {
  return rc < 0 ? Status::Error(-rc, std::move(message)) : Status::Ok();
}

#define MARU_RETURN_IF_ERROR(expr) \
  do {                             \
    ::maru::Status _st = (expr);   \
    if (!_st.ok()) return _st;     \
  } while (0)

}  // namespace maru
