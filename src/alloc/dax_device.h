// Device discovery for devdax character devices through libdaxctl.
#pragma once

#include <cstdint>
#include <string>

#include "util/status.h"

namespace maru {

struct DaxGeometry {
  uint64_t size = 0;
  uint64_t align = 0;
};

// Size and mapping alignment of /dev/daxX.Y.
Result<DaxGeometry> ProbeDaxDevice(const std::string &path);

}  // namespace maru
