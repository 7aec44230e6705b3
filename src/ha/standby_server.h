// `maru-server --standby`: before the normal start, the server follows the
// leader as a hot standby (src/ha/standby.h) into its own --db, until told
// to lead (SIGUSR1: it applies up to the head, then starts as usual on the
// database) or to stop (SIGTERM, SIGINT). Its state is in DB/STANDBY, one
// line rewritten as it changes: "applied SEQ lag RECORDS BYTES electable|
// behind: needs a snapshot|ERROR".
#pragma once

#include <string>

#include "util/status.h"

namespace maru {

struct StandbyServerOptions {
  std::string pool;
  std::string db;
  bool sync_writes = false;
  // The leader to take a snapshot from when behind (empty: none; the
  // standby then says it is behind and waits).
  std::string snapshot_from;
  std::string log_key;  // the records' signing key (OpLog::Authenticate)
};

// True: promoted (the caller starts the server on options.db); false:
// stopped by a signal.
Result<bool> RunStandby(const StandbyServerOptions &options);

}  // namespace maru
