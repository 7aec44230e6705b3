#include "status.h"

#include <cstring>

namespace maru {

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string err = strerror(errnum_);
  if (message_.empty()) return err;
  return message_ + " (" + err + ")";
}

}  // namespace maru
