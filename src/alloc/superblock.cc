#include "alloc/superblock.h"

#include <sys/random.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "util/checksum.h"
#include "util/units.h"

namespace maru {
namespace {

constexpr char kMagic[8] = {'M', 'A', 'R', 'U', 'P', 'O', 'O', 'L'};

// On-device layout, little-endian (the only byte order Maru runs on).
struct __attribute__((packed)) RawSuperblock {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint8_t pool_uuid[16];
  uint8_t device_uuid[16];
  uint64_t size;
  uint64_t alignment;
  uint64_t unit;
  uint64_t data_offset;
  uint64_t epoch;
  int64_t created_ns;
  int32_t numa_node;
  char label[64];
  uint32_t coherence;  // a Coherence
  uint32_t reserved;
  uint64_t control_offset;
  uint64_t index_offset;
  uint64_t index_bytes;
  uint64_t log_offset;
  uint64_t log_bytes;
  uint32_t crc;  // CRC32C of every byte above
};
static_assert(sizeof(RawSuperblock) <= kSuperblockBytes);

// Pools formatted before `coherence` existed have their CRC in its place
// and a header that ends there; they were all on coherent memory (hw).
constexpr uint32_t kHeaderBytesBeforeCoherence = offsetof(RawSuperblock, coherence) + 4;
// Pools formatted before the regions existed have their CRC after
// `coherence` and no control page, index or log in the pool.
constexpr uint32_t kHeaderBytesBeforeRegions = offsetof(RawSuperblock, reserved) + 4;

bool IsPowerOfTwo(uint64_t v) {
  return v && !(v & (v - 1));
}

void RandomBytes(void *out, size_t len) {
  auto *p = static_cast<uint8_t *>(out);
  while (len > 0) {
    ssize_t n = getrandom(p, len, 0);
    if (n <= 0) continue;
    p += n;
    len -= n;
  }
}

// The regions lie one after another between the superblock and the data,
// each aligned for a mapping of its own; a region that reached into the
// data or another region would let the server hand its bytes out as a chunk.
Status CheckRegions(const RawSuperblock &raw) {
  auto bad = [](const std::string &what) {
    return Status::Error(EINVAL, "superblock regions are inconsistent: " + what);
  };
  uint64_t end = kSuperblockBytes;
  if (raw.control_offset) {
    if (raw.control_offset != kSuperblockBytes) return bad("control page not after superblock");
    end = kSuperblockBytes + kControlBytes;
  }
  struct Region {
    const char *name;
    uint64_t offset, bytes;
  };
  for (const Region &r : {Region{"index", raw.index_offset, raw.index_bytes},
                          Region{"log", raw.log_offset, raw.log_bytes}}) {
    if (r.bytes == 0) {
      if (r.offset) return bad(std::string(r.name) + " has an offset but no bytes");
      continue;
    }
    if (r.offset % raw.alignment || r.bytes % raw.alignment)
      return bad(std::string(r.name) + " region is not aligned to " +
                 std::to_string(raw.alignment));
    if (r.offset < end || r.bytes > raw.data_offset || r.offset > raw.data_offset - r.bytes)
      return bad(std::string(r.name) + " region overlaps another or the data");
    end = r.offset + r.bytes;
  }
  return Status::Ok();
}

// A CRC only proves the bytes are the ones someone wrote, not that they
// make sense: a unit below a page would let extents share pages (and the
// mapping code assumes page-aligned extents), so geometry is checked on its
// own, the way mkpool would have made it.
Status CheckGeometry(const RawSuperblock &raw) {
  auto bad = [](const std::string &what) {
    return Status::Error(EINVAL, "superblock geometry is inconsistent: " + what);
  };
  if (!IsPowerOfTwo(raw.alignment) || raw.alignment < kMinUnit || raw.alignment > kMaxUnit)
    return bad("alignment " + std::to_string(raw.alignment) +
               " is not a power of two from 4K to 1G");
  if (!IsPowerOfTwo(raw.unit) || raw.unit < kMinUnit || raw.unit > kMaxUnit)
    return bad("allocation unit " + std::to_string(raw.unit) +
               " is not a power of two from 4K to 1G");
  if (raw.unit < raw.alignment) return bad("allocation unit is smaller than the alignment");
  if (raw.data_offset % raw.unit || raw.data_offset < kSuperblockBytes)
    return bad("data offset " + std::to_string(raw.data_offset) +
               " is not a whole number of units past the superblock");
  if (raw.size % raw.unit || raw.data_offset >= raw.size || raw.size - raw.data_offset < raw.unit)
    return bad("size " + std::to_string(raw.size) + " does not hold whole units of data");
  return CheckRegions(raw);
}

}  // namespace

void Superblock::Encode(uint8_t *out) const {
  memset(out, 0, kSuperblockBytes);
  RawSuperblock raw{};
  memcpy(raw.magic, kMagic, sizeof(kMagic));
  raw.version = kSuperblockVersion;
  raw.header_bytes = sizeof(RawSuperblock);
  memcpy(raw.pool_uuid, pool_uuid.data(), 16);
  memcpy(raw.device_uuid, device_uuid.data(), 16);
  raw.size = size;
  raw.alignment = alignment;
  raw.unit = unit;
  raw.data_offset = data_offset;
  raw.epoch = epoch;
  raw.created_ns = created_ns;
  raw.numa_node = numa_node;
  snprintf(raw.label, sizeof(raw.label), "%s", label.c_str());
  raw.coherence = static_cast<uint32_t>(coherence);
  raw.control_offset = control_offset;
  raw.index_offset = index_offset;
  raw.index_bytes = index_bytes;
  raw.log_offset = log_offset;
  raw.log_bytes = log_bytes;
  raw.crc = Crc32c(&raw, offsetof(RawSuperblock, crc));
  memcpy(out, &raw, sizeof(raw));
}

Result<Superblock> Superblock::Decode(const uint8_t *in, uint64_t device_size) {
  RawSuperblock raw;
  memcpy(&raw, in, sizeof(raw));
  if (memcmp(raw.magic, kMagic, sizeof(kMagic)) != 0)
    return Status::Error(EINVAL, "no Maru superblock (bad magic)");
  if (raw.version != kSuperblockVersion)
    return Status::Error(EINVAL, "unsupported superblock version " + std::to_string(raw.version));
  const bool before_coherence = raw.header_bytes == kHeaderBytesBeforeCoherence;
  const bool before_regions = raw.header_bytes == kHeaderBytesBeforeRegions;
  if (raw.header_bytes != sizeof(RawSuperblock) && !before_coherence && !before_regions)
    return Status::Error(EINVAL, "superblock header size mismatch");
  const size_t crc_at = before_coherence ? offsetof(RawSuperblock, coherence)
                        : before_regions ? offsetof(RawSuperblock, reserved)
                                         : offsetof(RawSuperblock, crc);
  uint32_t crc;
  memcpy(&crc, in + crc_at, sizeof(crc));
  if (Crc32c(in, crc_at) != crc)
    return Status::Error(EINVAL, "superblock CRC mismatch (corrupted)");
  if (before_coherence) raw.coherence = static_cast<uint32_t>(Coherence::kHw);
  if (before_coherence || before_regions)
    raw.control_offset = raw.index_offset = raw.index_bytes = raw.log_offset = raw.log_bytes = 0;
  if (raw.coherence > static_cast<uint32_t>(Coherence::kFlush))
    return Status::Error(EINVAL, "superblock names an unknown coherence mode " +
                                     std::to_string(raw.coherence) + " (a newer Maru's pool?)");
  if (Status s = CheckGeometry(raw); !s.ok()) return s;
  if (raw.size > device_size)
    return Status::Error(EINVAL, "device is smaller (" + FormatSize(device_size) +
                                     ") than its superblock says (" + FormatSize(raw.size) +
                                     "): truncated pool");
  Superblock sb;
  memcpy(sb.pool_uuid.data(), raw.pool_uuid, 16);
  memcpy(sb.device_uuid.data(), raw.device_uuid, 16);
  sb.size = raw.size;
  sb.alignment = raw.alignment;
  sb.unit = raw.unit;
  sb.data_offset = raw.data_offset;
  sb.epoch = raw.epoch;
  sb.created_ns = raw.created_ns;
  sb.numa_node = raw.numa_node;
  sb.coherence = static_cast<Coherence>(raw.coherence);
  sb.control_offset = raw.control_offset;
  sb.index_offset = raw.index_offset;
  sb.index_bytes = raw.index_bytes;
  sb.log_offset = raw.log_offset;
  sb.log_bytes = raw.log_bytes;
  raw.label[sizeof(raw.label) - 1] = '\0';
  sb.label = raw.label;
  return sb;
}

namespace {

std::string DescribeRegion(uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return "none";
  return FormatSize(bytes) + " at " + std::to_string(offset);
}

}  // namespace

std::string Superblock::Describe() const {
  char buf[1024];
  time_t created = created_ns / 1000000000;
  char when[64];
  tm t;
  gmtime_r(&created, &t);
  strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &t);
  snprintf(buf, sizeof(buf),
           "version:      %u\n"
           "pool uuid:    %s\n"
           "device uuid:  %s\n"
           "label:        %s\n"
           "size:         %" PRIu64
           " (%s)\n"
           "data:         %" PRIu64 " bytes from offset %" PRIu64
           "\n"
           "unit:         %" PRIu64
           " (%s)\n"
           "alignment:    %" PRIu64
           "\n"
           "epoch:        %016" PRIx64
           "\n"
           "numa node:    %d\n"
           "coherence:    %s\n"
           "control page: %s\n"
           "index:        %s\n"
           "log:          %s\n"
           "created:      %s\n",
           kSuperblockVersion, UuidToString(pool_uuid).c_str(), UuidToString(device_uuid).c_str(),
           label.c_str(), size, FormatSize(size).c_str(), data_bytes(), data_offset, unit,
           FormatSize(unit).c_str(), alignment, epoch, numa_node, CoherenceName(coherence),
           control_offset ? ("at " + std::to_string(control_offset)).c_str() : "none",
           DescribeRegion(index_offset, index_bytes).c_str(),
           DescribeRegion(log_offset, log_bytes).c_str(), when);
  return buf;
}

const char *CoherenceName(Coherence c) {
  return c == Coherence::kFlush ? "flush" : "hw";
}

Result<Coherence> ParseCoherence(const std::string &name) {
  if (name == "hw") return Coherence::kHw;
  if (name == "flush") return Coherence::kFlush;
  return Status::Error(EINVAL, "unknown coherence '" + name + "' (hw or flush)");
}

Uuid NewUuid() {
  Uuid u;
  RandomBytes(u.data(), u.size());
  u[6] = (u[6] & 0x0f) | 0x40;  // version 4
  u[8] = (u[8] & 0x3f) | 0x80;  // RFC 4122 variant
  return u;
}

uint64_t NewEpoch() {
  uint64_t e = 0;
  while (e == 0) RandomBytes(&e, sizeof(e));
  return e;
}

std::string UuidToString(const Uuid &u) {
  char buf[40];
  snprintf(buf, sizeof(buf), "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
           u[14], u[15]);
  return buf;
}

}  // namespace maru
