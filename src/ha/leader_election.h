// LeaderElection: which maru-server leads one pool, decided in etcd.
//
// Keys, all under /maru/<pool-uuid>/:
//   members/<id>  this member's endpoint, lag and whether it may lead, held
//                 by the member's lease (gone when the member is)
//   leader        the leader's id, endpoint and epoch, held by its lease
//   epoch         the last epoch handed out; only grows
// A member takes the leader key and raises the epoch in one transaction,
// only while no leader key exists and the epoch is the one it read, so every
// leader's epoch is higher than every earlier leader's.
//
// Safety rests on time: the leader renews its lease every third of the TTL
// and counts it held only until TTL minus a margin after the last renewal
// that etcd confirmed (counted from when the renewal was sent). etcd expires
// the lease no earlier than TTL after that renewal, so the leader stops
// (Leading() false, OnLost called) before anyone else can be elected. A
// process that was frozen past that time may still run a few instructions
// before it notices: writers of shared memory check the pool's epoch too
// (alloc/pool_control.h: PoolControl::Holds).
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ha/etcd_client.h"
#include "util/mutex.h"
#include "util/status.h"

namespace maru {

struct LeaderInfo {
  std::string id, endpoint;
  uint64_t epoch = 0;
};

struct ElectionOptions {
  EtcdOptions etcd;
  std::string pool;      // the pool's UUID
  std::string id;        // this member's name, unique among the pool's members
  std::string endpoint;  // where its clients reach it
  // The lease's TTL. etcd grants no less than its minimum, ceil(1.5 x its
  // --election-timeout), so a 1 s TTL needs --election-timeout 600 or less
  // (--heartbeat-interval 50 --election-timeout 500, say); the granted TTL
  // is the one used.
  int64_t ttl_s = 1;
  // How long before the lease could expire the leader stops: 0 means a
  // quarter of the TTL.
  int64_t margin_ms = 0;
  // Campaign() returns an error once etcd did not answer for this long.
  int64_t give_up_ms = 5000;
  // How often a member that does not lead looks for a vacant leader key.
  int64_t poll_ms = 50;
  // Called once, on the election's own thread, the moment the leader can no
  // longer be sure it holds the lease. It must not block.
  std::function<void()> on_lost;
  // Called from Campaign() with the leader it found in the way, whenever
  // that changes (an empty endpoint: the leader key was unreadable).
  std::function<void(const LeaderInfo &)> on_leader_seen;
  // Asked, while another leads, whether that leader has gone silent (its
  // heartbeat in the pool stopped): then its lease is revoked rather than
  // left to expire, and this member campaigns at once. Safe because the
  // pool's fence, not the lease, keeps an old leader from writing.
  std::function<bool(const LeaderInfo &)> leader_is_silent;
  // How long a leader's heartbeat in the pool may stand still before the
  // members deem it silent (ha/leadership.h); 0: wait for its lease.
  int64_t silence_ms = 400;
};

struct MemberInfo {
  std::string id, endpoint;
  int64_t lag = 0;  // how far behind the leader, as the member says (log bytes)
  bool electable = true;
};

class LeaderElection {
 public:
  // Registers this member under a new lease and starts keeping it alive.
  // etcd unreachable: an error within the etcd call timeout.
  static Result<std::unique_ptr<LeaderElection>> Start(const ElectionOptions &options);
  // Stops, and revokes the lease (the member and leader keys go with it).
  ~LeaderElection();

  // Publishes how far behind this member is; one not `electable` does not
  // campaign (Campaign() waits until it is).
  Status SetLag(int64_t lag, bool electable) EXCLUDES(mu_);
  // Blocks until this member leads; returns its epoch. ECANCELED after
  // Stop(); an error when etcd stayed unreachable for give_up_ms.
  Result<uint64_t> Campaign() EXCLUDES(mu_);
  // True while this member leads and surely still holds its lease: a clock
  // read and two atomic loads.
  bool Leading() const;
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }
  // Steps down: removes the leader key if it is still ours. The member
  // stays registered and may campaign again.
  Status Resign() EXCLUDES(mu_);
  // Makes Campaign() return; stops keeping the lease alive.
  void Stop() EXCLUDES(mu_);

  Result<std::optional<LeaderInfo>> Leader() { return ReadLeader(etcd_.get(), options_.pool); }
  Result<std::vector<MemberInfo>> Members() { return ReadMembers(etcd_.get(), options_.pool); }
  // The same for a tool that is no member (maructl cluster status).
  static Result<std::optional<LeaderInfo>> ReadLeader(EtcdClient *etcd, const std::string &pool);
  static Result<std::vector<MemberInfo>> ReadMembers(EtcdClient *etcd, const std::string &pool);
  int64_t ttl_ms() const { return ttl_ms_.load(); }
  int64_t renewals() const { return renewals_.load(); }

  // The keys, for tools that read them without being a member.
  static std::string Prefix(const std::string &pool) { return "/maru/" + pool + "/"; }
  static std::optional<LeaderInfo> ParseLeader(const std::string &value);
  static std::optional<MemberInfo> ParseMember(const std::string &id, const std::string &value);

 private:
  LeaderElection(ElectionOptions options, std::unique_ptr<EtcdClient> etcd);
  Status Register() EXCLUDES(mu_);
  std::string MemberKey() const { return Prefix(options_.pool) + "members/" + options_.id; }
  std::string LeaderKey() const { return Prefix(options_.pool) + "leader"; }
  std::string EpochKey() const { return Prefix(options_.pool) + "epoch"; }
  std::string MemberValue() const REQUIRES(mu_);
  // One attempt to take the leader key: the new epoch, 0 if someone leads
  // (then `*seen` is who).
  Result<uint64_t> TryAcquire(std::string *seen) EXCLUDES(mu_);
  void KeepAlive() EXCLUDES(mu_);
  void Watchdog() EXCLUDES(mu_);
  // Ends leadership; calls on_lost if it was still on.
  void Lose();
  int64_t HeldUntilMs() const;
  // Waits up to `ms` or until Stop(); false once stopped.
  bool Pause(int64_t ms) EXCLUDES(mu_);

  const ElectionOptions options_;
  std::unique_ptr<EtcdClient> etcd_;
  std::unique_ptr<EtcdClient> keepalive_etcd_;  // set before the threads start
  std::atomic<int64_t> ttl_ms_{1000};
  std::atomic<int64_t> margin_ms_{250};
  std::atomic<int64_t> confirmed_ms_{0};  // when the last confirmed renewal was sent
  std::atomic<bool> leading_{false};
  std::atomic<uint64_t> epoch_{0};
  std::atomic<int64_t> renewals_{0};

  Mutex mu_;
  CondVar cv_;
  bool stopped_ GUARDED_BY(mu_) = false;
  int64_t lease_ GUARDED_BY(mu_) = 0;  // 0: none (expired; registers again)
  int64_t lag_ GUARDED_BY(mu_) = 0;
  bool electable_ GUARDED_BY(mu_) = true;
  std::thread keepalive_, watchdog_;
};

}  // namespace maru
