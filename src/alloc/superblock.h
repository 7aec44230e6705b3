// The pool superblock: the first aligned block of every pool device. Only
// `maructl mkpool` writes it; daemons read and validate it and refuse a
// device without a valid one.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "util/status.h"

namespace maru {

using Uuid = std::array<uint8_t, 16>;

constexpr uint32_t kSuperblockVersion = 1;
constexpr uint64_t kSuperblockBytes = 4096;
// The control page follows the superblock in pools that have one.
constexpr uint64_t kControlBytes = 4096;
// Allocation units (and mapping alignments) a superblock may declare.
constexpr uint64_t kMinUnit = 4096;
constexpr uint64_t kMaxUnit = 1ull << 30;

// What a pool's hosts do to keep its shared memory coherent (docs/design.md,
// "Coherence"). Set at mkpool and read by every host from the pool, so that
// all agree: a host that flushed while another did not would lose writes.
enum class Coherence : uint32_t {
  kHw = 0,     // the hardware keeps caches coherent (one host, CXL 3 with back-invalidate)
  kFlush = 1,  // it does not (a CXL 2.0 switch): writers flush, readers invalidate
};
const char *CoherenceName(Coherence c);
// "hw" or "flush"; anything else is an error that names the choices.
Result<Coherence> ParseCoherence(const std::string &name);

struct Superblock {
  Uuid pool_uuid{};
  Uuid device_uuid{};
  uint64_t size = 0;         // device bytes, superblock included
  uint64_t alignment = 0;    // mapping alignment (devdax align, else the page size)
  uint64_t unit = 0;         // allocation unit; extents are multiples of it
  uint64_t data_offset = 0;  // first allocatable byte (a multiple of unit)
  uint64_t epoch = 0;        // changes whenever the memory may have lost its contents
  int64_t created_ns = 0;
  int32_t numa_node = -1;  // node the memory was bound to at format time, -1 if none
  std::string label;       // up to 63 bytes
  Coherence coherence = Coherence::kHw;
  // Regions between the superblock and the data, reserved at mkpool so that
  // every host that maps the pool finds them (0: the pool has none).
  uint64_t control_offset = 0;  // the control page (alloc/pool_control.h)
  uint64_t index_offset = 0;    // the shared lookup index
  uint64_t index_bytes = 0;
  uint64_t log_offset = 0;  // the metadata replication log
  uint64_t log_bytes = 0;

  uint64_t data_bytes() const { return size - data_offset; }

  // Serializes into exactly kSuperblockBytes bytes, with a CRC32C.
  void Encode(uint8_t *out) const;
  // Parses and validates magic, version, CRC and geometry; says what is wrong.
  static Result<Superblock> Decode(const uint8_t *in, uint64_t device_size);
  std::string Describe() const;
};

Uuid NewUuid();
uint64_t NewEpoch();
std::string UuidToString(const Uuid &uuid);

}  // namespace maru
