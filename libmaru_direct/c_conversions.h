// Conversions between the C API's forms (maru_direct.h) and the library's
// (see src/proto/conversions.h for the other pairs). The C enums carry the
// same numbers as the C++ ones, which the static_asserts hold to.
#pragma once

#include "maru_direct_internal.h"  // the C API, beside namespace maru
#include "util/checksum.h"

namespace maru {

static_assert(MARU_CHECKSUM_NONE == static_cast<int>(ChecksumKind::kNone));
static_assert(MARU_CHECKSUM_XXH3 == static_cast<int>(ChecksumKind::kXxh3));
static_assert(MARU_CHECKSUM_CRC32C == static_cast<int>(ChecksumKind::kCrc32c));

// `checksum` is an enum maru_checksum, checked by the caller.
inline ChecksumKind ChecksumFromC(int checksum) {
  return static_cast<ChecksumKind>(checksum);
}

}  // namespace maru
