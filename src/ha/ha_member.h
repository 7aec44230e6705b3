// HaMember: a maru-server that is one member of a pool's group of servers
// (docs/ha.md). It follows the leader as a hot standby (the pool's
// replication log into its own database), publishing how far behind it is,
// while its Leadership (ha/leadership.h) campaigns. Once elected (the pool
// fenced at its epoch, so that the old leader's next write check fails) it
// applies the log up to the head and returns: the server then starts on
// its database as after a restart (recovery reclaims the writes that were
// in flight).
//
// While it leads, MayWrite() says whether the server may still change
// anything shared. The engine checks it before each commit. When the lease
// is in doubt the server stops at once (fail-stop; its service restarts it
// as a standby): its memory may be behind a newer leader's, and a standby
// is what can catch up.
#pragma once

#include <signal.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "alloc/pool_control.h"
#include "alloc/pool_device.h"
#include "ha/leader_election.h"
#include "ha/leader_gate.h"
#include "ha/leadership.h"
#include "util/mutex.h"
#include "util/status.h"

namespace maru {

struct HaMemberOptions {
  std::string pool;  // the pool's path (the first --pool)
  std::string db;    // this server's own metadata database
  bool sync_writes = false;
  std::string log_key;       // the log records' signing key (OpLog::Authenticate)
  ElectionOptions election;  // etcd, id, endpoint, TTL (the pool's UUID is filled in)
};

class HaMember {
 public:
  // A server without etcd leads the pool alone: it refuses while another
  // server of the pool is alive (its heartbeat in the control page is
  // fresh, or its process on this host still runs), and when the pool is led
  // through etcd (its fence epoch is set); then it announces itself and
  // keeps a heartbeat, so that a second one refuses in turn. A pool without
  // a control page (an older format) is led as before, unchecked.
  static Result<std::unique_ptr<HaMember>> LeadAlone(const std::string &pool,
                                                     const std::string &endpoint);

  // Follows and campaigns until this member leads. nullptr when one of
  // `stop` (blocked in the caller) arrived first. A one-line error when
  // etcd is unreachable at start, the pool has no control page or log, or
  // the pool is fenced past the epoch this member was given.
  static Result<std::unique_ptr<HaMember>> FollowUntilLeading(const HaMemberOptions &options,
                                                              const sigset_t &stop);
  ~HaMember();

  uint64_t epoch() const { return epoch_; }
  // One clock read and a few loads: call before every write to shared state.
  bool MayWrite() const { return leadership_ ? leadership_->MayWrite() : control_.Holds(epoch_); }
  // What the service tells clients: the epoch it leads with.
  const LeaderGate &gate() const { return gate_; }
  // The pool's servers as etcd last listed them (refreshed every second
  // while this one leads): for the stats, marutop and /metrics.
  std::vector<MemberInfo> Members() const EXCLUDES(members_mu_);

 private:
  HaMember(std::unique_ptr<PoolDevice> device, PoolControl control)
      : device_(std::move(device)), control_(control) {}
  // Publishes this server as the pool's only server in the control page,
  // and keeps its heartbeat there.
  void Announce();
  void Beat();
  // Keeps members_ current, until stop_.
  void ListMembers() EXCLUDES(members_mu_);

  // Who this process is, in the leader record: "PID@HOST/BOOT".
  static std::string ProcessId();

  HaMemberOptions options_;
  std::unique_ptr<PoolDevice> device_;  // maps the control page
  PoolControl control_;
  LeaderGate gate_;
  std::unique_ptr<Leadership> leadership_;  // with etcd
  uint64_t epoch_ = 0;
  std::atomic<bool> stop_{false};
  std::thread heartbeat_;
  std::thread lister_;
  mutable Mutex members_mu_;
  std::vector<MemberInfo> members_ GUARDED_BY(members_mu_);
};

}  // namespace maru
