// Conversions between the server's in-memory forms (Inode, Version,
// ExtentList, wire enums) and what it keeps in RocksDB (schema.proto), one
// function per pair; MetaDb stores the records as they are. Wire <-> memory
// conversions live in src/proto/conversions.h.
#pragma once

#include <cstdint>

#include "alloc/extent.h"
#include "meta/inode.h"
#include "meta/schema.pb.h"

namespace maru {

schema::Inode ToRecord(const Inode &inode);
Inode FromRecord(const schema::Inode &record);
void ToRecordExtents(const ExtentList &extents,
                     google::protobuf::RepeatedPtrField<schema::Extent> *out);
ExtentList FromRecordExtents(const google::protobuf::RepeatedPtrField<schema::Extent> &in);
// The extents of generation `gen`, freed while something still uses them;
// `writing`, if set, is the reservation its writer still holds.
schema::Retired ToRetiredRecord(uint64_t gen, const ExtentList &extents, const Version *writing,
                                uint64_t ino);

}  // namespace maru
