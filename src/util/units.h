// Sizes as people type and read them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "status.h"

namespace maru {

// "4096", "512K", "512M", "4G", "1T" (powers of 1024; an optional trailing
// "B" or "iB" is accepted). EINVAL on anything else, ERANGE on overflow.
Result<uint64_t> ParseSize(std::string_view text);
// 1536 -> "1.5K", 33554432 -> "32M".
std::string FormatSize(uint64_t bytes);

}  // namespace maru
