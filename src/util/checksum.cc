#include "checksum.h"

#include <xxhash.h>

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>
#endif

namespace maru {
namespace {

constexpr uint32_t kCrc32cPoly = 0x82f63b78;

std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kCrc32cPoly : c >> 1;
    table[i] = c;
  }
  return table;
}

uint32_t Crc32cSoftware(const uint8_t *p, size_t len, uint32_t crc) {
  static const std::array<uint32_t, 256> table = MakeCrcTable();
  while (len--) crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(const uint8_t *p, size_t len,
                                                          uint32_t crc) {
  uint64_t c = crc;
  while (len >= 8) {
    uint64_t word;
    memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    len -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (len--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

bool HaveSse42() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  return (c & bit_SSE4_2) != 0;
}
#endif

}  // namespace

uint32_t Crc32c(const void *data, size_t len, uint32_t crc) {
  const auto *p = static_cast<const uint8_t *>(data);
  crc = ~crc;
#if defined(__x86_64__)
  static const bool hw = HaveSse42();
  crc = hw ? Crc32cHardware(p, len, crc) : Crc32cSoftware(p, len, crc);
#else
  crc = Crc32cSoftware(p, len, crc);
#endif
  return ~crc;
}

uint64_t Xxh3(const void *data, size_t len) {
  return XXH3_64bits(data, len);
}

uint64_t Checksum(ChecksumKind kind, const void *data, size_t len) {
  switch (kind) {
    case ChecksumKind::kXxh3:
      return Xxh3(data, len);
    case ChecksumKind::kCrc32c:
      return Crc32c(data, len);
    case ChecksumKind::kNone:
      break;
  }
  return 0;
}

const char *ChecksumName(ChecksumKind kind) {
  switch (kind) {
    case ChecksumKind::kXxh3:
      return "xxh3";
    case ChecksumKind::kCrc32c:
      return "crc32c";
    case ChecksumKind::kNone:
      break;
  }
  return "none";
}

ChecksumStream::ChecksumStream(ChecksumKind kind) : kind_(kind) {
  if (kind_ == ChecksumKind::kXxh3) {
    xxh3_ = XXH3_createState();
    XXH3_64bits_reset(static_cast<XXH3_state_t *>(xxh3_));
  }
}

ChecksumStream::~ChecksumStream() {
  if (xxh3_) XXH3_freeState(static_cast<XXH3_state_t *>(xxh3_));
}

void ChecksumStream::Update(const void *data, size_t len) {
  if (kind_ == ChecksumKind::kXxh3)
    XXH3_64bits_update(static_cast<XXH3_state_t *>(xxh3_), data, len);
  else if (kind_ == ChecksumKind::kCrc32c)
    crc_ = Crc32c(data, len, crc_);
}

uint64_t ChecksumStream::Digest() const {
  if (kind_ == ChecksumKind::kXxh3) return XXH3_64bits_digest(static_cast<XXH3_state_t *>(xxh3_));
  return kind_ == ChecksumKind::kCrc32c ? crc_ : 0;
}

bool ParseChecksumName(std::string_view name, ChecksumKind *kind) {
  if (name == "xxh3")
    *kind = ChecksumKind::kXxh3;
  else if (name == "crc32c")
    *kind = ChecksumKind::kCrc32c;
  else if (name == "none")
    *kind = ChecksumKind::kNone;
  else
    return false;
  return true;
}

}  // namespace maru
