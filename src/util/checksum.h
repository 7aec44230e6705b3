// Chunk checksums: xxh3-64 (default) or crc32c. Both run at memory speed, so
// sealing with a checksum costs one extra read of the chunk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace maru {

enum class ChecksumKind : int { kNone = 0, kXxh3 = 1, kCrc32c = 2 };

uint32_t Crc32c(const void *data, size_t len, uint32_t crc = 0);
uint64_t Xxh3(const void *data, size_t len);
uint64_t Checksum(ChecksumKind kind, const void *data, size_t len);
const char *ChecksumName(ChecksumKind kind);
// "xxh3", "crc32c", "none"; false when unknown.
bool ParseChecksumName(std::string_view name, ChecksumKind *kind);

}  // namespace maru
