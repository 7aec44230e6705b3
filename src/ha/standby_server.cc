#include "ha/standby_server.h"

#include <signal.h>
#include <time.h>

#include <cstdio>

#include "ha/pool_log.h"
#include "ha/snapshot_client.h"
#include "ha/standby.h"
#include "util/clock.h"
#include "util/log.h"

namespace maru {
namespace {

std::string Describe(const Standby &standby) {
  const Standby::Lag lag = standby.lag();
  char line[256];
  snprintf(line, sizeof line, "applied %llu lag %llu %llu %s\n",
           static_cast<unsigned long long>(standby.applied().seq),
           static_cast<unsigned long long>(lag.records), static_cast<unsigned long long>(lag.bytes),
           lag.error.empty() ? "electable" : lag.error.c_str());
  return line;
}

// Replaces DB/STANDBY with `line` (a rename: a reader sees one or the other).
void WriteState(const std::string &db, const std::string &line) {
  const std::string tmp = db + "/STANDBY.new";
  FILE *f = fopen(tmp.c_str(), "w");
  if (f == nullptr) return;
  fputs(line.c_str(), f);
  if (fclose(f) == 0) rename(tmp.c_str(), (db + "/STANDBY").c_str());
}

// Replaces the standby's database with the leader's snapshot and tails on
// from there.
void Bootstrap(Standby *standby, const std::string &leader) {
  standby->Stop();
  Result<std::vector<std::pair<std::string, std::string>>> records = FetchSnapshot(leader);
  Status s = records.ok() ? standby->Bootstrap(*records) : records.status();
  if (s.ok())
    LOG_INFO("standby: bootstrapped from %s at seq %llu", leader.c_str(),
             static_cast<unsigned long long>(standby->applied().seq));
  else
    LOG_WARN("standby: no snapshot from %s: %s", leader.c_str(), s.ToString().c_str());
  standby->Start();
}

}  // namespace

Result<bool> RunStandby(const StandbyServerOptions &options) {
  Result<std::unique_ptr<PoolLog>> log = PoolLog::Open(options.pool);
  if (!log.ok()) return log.status();
  if (!*log)
    return Status::Error(EINVAL, options.pool +
                                     " has no replication log: format it with maructl mkpool "
                                     "--log-size SIZE to run standbys");
  Result<std::unique_ptr<MetaDb>> db = MetaDb::Open(options.db, options.sync_writes);
  if (!db.ok()) return db.status();
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGINT, SIGTERM, SIGUSR1}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  (*log)->log().Authenticate(options.log_key);
  Standby standby(db->get(), &(*log)->log());
  MARU_RETURN_IF_ERROR(standby.Open());
  standby.Start();
  LOG_INFO("standby: following %s from seq %llu", options.pool.c_str(),
           static_cast<unsigned long long>(standby.applied().seq));
  std::string state;
  int64_t next_snapshot_ns = 0;  // tries at most once a second
  for (;;) {
    if (!options.snapshot_from.empty() && standby.lag().behind &&
        MonotonicNs() >= next_snapshot_ns) {
      next_snapshot_ns = MonotonicNs() + 1000000000;
      Bootstrap(&standby, options.snapshot_from);
    }
    const std::string now = Describe(standby);
    if (now != state) WriteState(options.db, state = now);
    const timespec tick = {0, 20 * 1000 * 1000};
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGUSR1) break;
    if (sig == SIGINT || sig == SIGTERM) {
      standby.Stop();
      WriteState(options.db, Describe(standby));
      return false;
    }
  }
  Status promoted = standby.Promote();
  WriteState(options.db, Describe(standby));
  if (!promoted.ok()) return promoted;
  return true;  // the database closes here; the server opens it to lead
}

}  // namespace maru
