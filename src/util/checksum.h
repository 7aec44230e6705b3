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

// A checksum over data given in pieces (a fragmented chunk); equal to
// Checksum() of the pieces laid end to end.
class ChecksumStream {
 public:
  explicit ChecksumStream(ChecksumKind kind);
  ~ChecksumStream();
  ChecksumStream(const ChecksumStream &) = delete;
  ChecksumStream &operator=(const ChecksumStream &) = delete;
  void Update(const void *data, size_t len);
  uint64_t Digest() const;

 private:
  ChecksumKind kind_;
  void *xxh3_ = nullptr;  // XXH3_state_t
  uint32_t crc_ = 0;
};
// "xxh3", "crc32c", "none"; false when unknown.
bool ParseChecksumName(std::string_view name, ChecksumKind *kind);

}  // namespace maru
