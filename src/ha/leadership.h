// Leadership: a maru-server's part in its pool's election, from campaign to
// stepping down, on a thread of its own.
//
// It campaigns (ha/leader_election.h); once elected it raises the pool's
// fencing epoch (alloc/pool_control.h), publishes the leader record in the
// control page, opens the gate (ha/leader_gate.h) and calls on_lead. It
// keeps the record's heartbeat while it leads. The moment the election
// can no longer be sure of the lease, the gate closes and on_lost is
// called; it then campaigns again, under a new lease, for a new epoch. A
// pool whose fence is already past the epoch it was given makes it resign
// and stop campaigning: etcd is behind the pool (another cluster, or its
// data lost), and only an operator can say which is right.
//
// While it does not lead, the gate names the leader it last saw.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <thread>

#include "alloc/pool_control.h"
#include "ha/leader_election.h"
#include "ha/leader_gate.h"
#include "util/mutex.h"
#include "util/status.h"

namespace maru {

class Leadership {
 public:
  struct Hooks {
    std::function<void(uint64_t epoch)> on_lead;  // the gate is open, the fence ours
    std::function<void()> on_lost;                // the gate is closed; must not block
  };

  // Registers with etcd (an error within the etcd call timeout if it is
  // unreachable) and starts campaigning. `gate` outlives this.
  static Result<std::unique_ptr<Leadership>> Start(const ElectionOptions &options,
                                                   PoolControl control, LeaderGate *gate,
                                                   Hooks hooks);
  // Steps down (the gate closes) and leaves the election.
  ~Leadership();

  // The check before each write to a shared structure: this server leads,
  // its lease surely holds, and the pool is still fenced at its epoch.
  bool MayWrite() const;
  // The epoch it leads with; 0 when it does not lead.
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // Why it stopped campaigning, or why its last campaign failed (etcd
  // unreachable: it tries again); ok otherwise.
  Status status() const EXCLUDES(mu_);
  LeaderElection &election() { return *election_; }

 private:
  Leadership(const ElectionOptions &options, PoolControl control, LeaderGate *gate, Hooks hooks);
  void Run() EXCLUDES(mu_);
  // Leads with `epoch` until the lease or the fence is lost.
  void Lead(uint64_t epoch) EXCLUDES(mu_);
  void SetStatus(Status s) EXCLUDES(mu_);
  // Whether `leader`'s heartbeat in the pool stood still for
  // options_.silence_ms, as this host's clock measures it (no clocks of two
  // hosts are compared). Called by the campaign only.
  bool LeaderSilent(const LeaderInfo &leader);
  bool Pause(int64_t ms) EXCLUDES(mu_);

  const ElectionOptions options_;
  PoolControl control_;
  LeaderGate *const gate_;
  const Hooks hooks_;
  std::unique_ptr<LeaderElection> election_;
  std::atomic<uint64_t> epoch_{0};
  mutable Mutex mu_;
  CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  Status status_ GUARDED_BY(mu_);
  std::thread thread_;
  // The leader's heartbeat as last seen change; the campaign's thread only.
  struct {
    uint64_t epoch = 0;
    int64_t beat_ns = 0;
    int64_t changed_ms = 0;
  } seen_;
};

}  // namespace maru
