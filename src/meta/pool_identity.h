// Pool identity at start: which devices make up the pool.
//
// The database remembers each device of the pool by index, uuid, epoch and
// path; extents name devices by index. At start the devices given on the
// command line are matched with those records (by uuid, else by path for a
// device formatted anew), new ones get the next index, and a device whose
// uuid or epoch changed was reset: the chunks on it are gone, so their
// records are dropped before anything is restored from them.
#pragma once

#include <string>
#include <vector>

#include "alloc/superblock.h"
#include "meta/meta_db.h"
#include "meta/space_manager.h"

namespace maru {

// Matches `paths` with the devices `contents` knows, adds each device to
// `space`, writes the updated identity into `batch`, and drops from
// `contents` (and, through `batch`, from the database) the chunks of
// devices that were reset. Returns the pool's uuid.
Result<std::string> ReconcilePoolIdentity(const std::vector<std::string> &paths,
                                          MetaDb::Contents *contents, MetaDb::Batch *batch,
                                          SpaceManager *space);

// A uuid as the identity record and the wire carry it: 16 raw bytes.
std::string UuidBytes(const Uuid &u);

}  // namespace maru
