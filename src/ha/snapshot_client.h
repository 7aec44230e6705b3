// The standby's side of its bootstrap: the leader's metadata database,
// record by record, through the Replication service's Snapshot call.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "util/status.h"

namespace maru {

// Every record of the leader's database at `address` (unix://PATH); this
// process must be root there.
Result<std::vector<std::pair<std::string, std::string>>> FetchSnapshot(const std::string &address);

}  // namespace maru
