// No stale bytes: an extent handed to a writer who cannot map the pool is
// zeroed first. Such a writer (a local user outside the pool group writing
// through maru-fuse or gRPC, a remote client behind the agent) cannot see
// what a freed chunk left in the extent, but it could seal it unwritten and
// publish those bytes to readers who could not read them before. A writer
// who can map the pool could read every byte anyway (docs/security.md), so
// its extents are handed over as they are: zeroing costs a pass over them.
//
// How: the server maps each device once, whole, and clears the range, on a
// file (tmpfs) as on a device (devdax). Punching a hole and allocating again
// gives zero pages too, but measured three times slower for the store:
// every writer's mapping then faults each page in again
// (docs/benchmarks.md).
#pragma once

#include <string>

#include "alloc/extent.h"
#include "meta/identity.h"
#include "meta/space_manager.h"
#include "util/status.h"

namespace maru {

// Whether `c` could open the pool device at `path` for reading and writing,
// by the device file's mode, owner and group (root always can).
bool MayMapPool(const std::string &path, const Caller &c);

// Zeroes [offset, offset + length) of the pool device at `path`.
Status ZeroRange(const std::string &path, uint64_t offset, uint64_t length);

// Zeroes `extents` unless `c` could map every device they lie on.
Status ScrubForWriter(const SpaceManager &space, const Caller &c, const ExtentList &extents);

}  // namespace maru
