// Conversions between the wire forms of src/proto/maru.proto and the forms
// the code works with. One place per pair:
//   wire <-> memory (alloc's ExtentList, util's ChecksumKind, renewed
//     leases): here;
//   memory and wire <-> disk (src/meta/schema.proto): src/meta/records.h,
//     private to the server;
//   C API (libmaru_direct/maru_direct.h) <-> memory: libmaru_direct/c_conversions.h.
// Enums that mean the same on both sides are tied by static_asserts, so a
// cast between them can only be a rename.
#pragma once

#include "alloc/extent.h"
#include "maru.pb.h"
#include "util/checksum.h"

namespace maru {

static_assert(static_cast<int>(ChecksumKind::kNone) == rpc::CHECKSUM_NONE);
static_assert(static_cast<int>(ChecksumKind::kXxh3) == rpc::CHECKSUM_XXH3);
static_assert(static_cast<int>(ChecksumKind::kCrc32c) == rpc::CHECKSUM_CRC32C);
static_assert(rpc::ChecksumType_MAX == rpc::CHECKSUM_CRC32C,
              "a checksum type was added to the wire only: add it to ChecksumKind");

// Value-preserving both ways: an unknown value stays unknown (and
// Checksum() / ChecksumName() treat it as such).
inline ChecksumKind FromWire(rpc::ChecksumType type) {
  return static_cast<ChecksumKind>(type);
}
inline rpc::ChecksumType ToWire(ChecksumKind kind) {
  return static_cast<rpc::ChecksumType>(kind);
}

inline ExtentList FromWire(const google::protobuf::RepeatedPtrField<rpc::Extent> &extents) {
  ExtentList out;
  out.reserve(extents.size());
  for (const rpc::Extent &e : extents) out.push_back(Extent{e.device(), e.offset(), e.length()});
  return out;
}

inline void ToWireExtents(const ExtentList &extents,
                          google::protobuf::RepeatedPtrField<rpc::Extent> *out) {
  out->Reserve(static_cast<int>(extents.size()));
  for (const Extent &e : extents) {
    rpc::Extent *x = out->Add();
    x->set_device(e.device);
    x->set_offset(e.offset);
    x->set_length(e.length);
  }
}

// A lease renewed when a session is resumed. On the wire it is a HeldLease
// that names the old lease in `lease` and carries the new id in `ino`
// (OpenSessionReply.renewed); both ends read and write it only here.
struct RenewedLease {
  uint64_t old_lease = 0;
  uint64_t new_lease = 0;
  uint64_t gen = 0;
};

inline void ToWire(const RenewedLease &r, rpc::HeldLease *out) {
  out->set_lease(r.old_lease);
  out->set_ino(r.new_lease);
  out->set_gen(r.gen);
}

inline RenewedLease RenewedFromWire(const rpc::HeldLease &held) {
  return RenewedLease{held.lease(), held.ino(), held.gen()};
}

}  // namespace maru
