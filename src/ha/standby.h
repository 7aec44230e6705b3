// A hot standby: tails the replication log (src/ha/op_log.h) into its own
// metadata database, each record with its log position in the same write,
// so that a standby killed at any point resumes at exactly the next record.
// Promote() applies up to the head and stops; the normal server start then
// runs on the database (recovery reclaims the writes in flight, as after a
// restart of the leader).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ha/op_log.h"
#include "meta/meta_db.h"
#include "util/mutex.h"
#include "util/status.h"

namespace maru {

class Standby {
 public:
  // How far behind the log's head this standby is.
  struct Lag {
    uint64_t records = 0;
    uint64_t bytes = 0;
    bool behind = false;  // the ring overwrote records not read: needs a snapshot
    std::string error;    // why tailing stopped, if it did
  };

  // `db` and `log` outlive the standby.
  Standby(MetaDb *db, OpLog *log);
  ~Standby();
  Standby(const Standby &) = delete;
  Standby &operator=(const Standby &) = delete;

  // Reads where the database stands in the log.
  Status Open();
  // Applies every record published so far, in order. ESTALE: behind (needs
  // a snapshot); EBADMSG: a record that does not verify, not applied (the
  // standby stays where it was and says so).
  Status CatchUp();
  // Tails in a thread until Stop().
  void Start();
  void Stop();
  // Applies up to the head and stops tailing; an error leaves the database
  // as it is and the standby unfit to lead.
  Status Promote();
  // Replaces the database with a snapshot's records (its log position
  // among them); tailing goes on from there.
  Status Bootstrap(const std::vector<std::pair<std::string, std::string>> &records);

  OpLogPosition applied() const;
  Lag lag() const;
  // Fit to be elected: current with the log (not behind, not stuck).
  bool electable() const;

 private:
  Status ApplyNext(bool *applied);
  void Tail();

  MetaDb *const db_;
  OpLog *const log_;
  mutable Mutex mu_;
  CondVar stop_cv_;
  OpLogPosition at_ GUARDED_BY(mu_);
  uint64_t last_epoch_ GUARDED_BY(mu_) = 0;
  Status stuck_ GUARDED_BY(mu_);  // the error tailing stopped at
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace maru
