#include "ha/ha_member.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "ha/pool_log.h"
#include "ha/standby.h"
#include "meta/meta_db.h"
#include "util/clock.h"
#include "util/log.h"

namespace maru {
namespace {

constexpr int kLostLeadership = 75;
// A server alone on a pool beats every 100 ms; after this long without a
// beat it is gone.
constexpr int64_t kAloneStaleNs =
    1000000000;  // EX_TEMPFAIL: the service starts it again, as a standby

// Called by the election the moment this server can no longer be sure it
// holds its lease: another may be elected soon, and this server's memory
// would then be stale. It stops at once rather than step down in place, so
// that nothing it holds (a half-made reply, a timer) can write later; the
// service manager starts it again as a standby.
void LoseLeadership() {
  LOG_ERROR("lost the leadership lease: stopping, to come back as a standby");
  _exit(kLostLeadership);
}

// Publishes the standby's lag in etcd when it changes, and at least every
// second (etcd is written on change only: every member does this).
class LagPublisher {
 public:
  LagPublisher(LeaderElection *election, const Standby *standby)
      : election_(election), standby_(standby) {}
  void Tick() {
    const Standby::Lag lag = standby_->lag();
    const bool electable = standby_->electable();
    const int64_t now = MonotonicNs();
    if (lag.bytes == bytes_ && electable == electable_ && now - last_ns_ < 1000000000) return;
    Status s = election_->SetLag(static_cast<int64_t>(lag.bytes), electable);
    if (!s.ok() && s.message() != error_) LOG_WARN("standby: %s", s.message().c_str());
    error_ = s.ok() ? "" : s.message();
    if (!electable && electable_) LOG_WARN("standby: not electable: %s", lag.error.c_str());
    bytes_ = lag.bytes;
    electable_ = electable;
    last_ns_ = now;
  }

 private:
  LeaderElection *election_;
  const Standby *standby_;
  uint64_t bytes_ = ~0ull;
  bool electable_ = true;
  int64_t last_ns_ = 0;
  std::string error_;
};

std::string BootId() {
  char id[64] = {};
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f == nullptr) return "";
  if (fgets(id, sizeof id, f) == nullptr) id[0] = '\0';
  fclose(f);
  std::string s = id;
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// Whether the process `id` (HaMember::ProcessId) is alive: asked of the
// kernel when it ran on this host since boot, else read from its heartbeat.
bool Alive(const LeaderRecord &leader, const std::string &self) {
  const size_t at = leader.id.find('@');
  if (at != std::string::npos && leader.id.substr(at) == self.substr(self.find('@'))) {
    const pid_t pid = static_cast<pid_t>(atoi(leader.id.c_str()));
    return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
  }
  return RealtimeNs() - leader.heartbeat_ns < kAloneStaleNs;
}

}  // namespace

std::string HaMember::ProcessId() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return std::to_string(getpid()) + "@" + host + "/" + BootId();
}

Result<std::unique_ptr<HaMember>> HaMember::LeadAlone(const std::string &pool,
                                                      const std::string &endpoint) {
  Result<std::unique_ptr<PoolDevice>> device = PoolDevice::Open(pool, {});
  if (!device.ok()) return device.status();
  Result<PoolControl> control = PoolControl::At((*device)->base(), (*device)->superblock());
  if (!control.ok()) return std::unique_ptr<HaMember>();  // an older pool: as before
  if (uint64_t epoch = control->FenceEpoch())
    return Status::Error(EBUSY, pool + " is led through etcd (epoch " + std::to_string(epoch) +
                                    "): start maru-server with --etcd");
  const std::string self = ProcessId();
  // A server that stopped on another host leaves a heartbeat that goes
  // stale within a second: wait for that rather than refuse a restart.
  const int64_t give_up = MonotonicNs() + kAloneStaleNs + 200000000;
  for (LeaderRecord leader = control->Leader(); !leader.id.empty() && Alive(leader, self);
       leader = control->Leader()) {
    if (MonotonicNs() > give_up)
      return Status::Error(EBUSY, "another maru-server (" + leader.id + ", " + leader.endpoint +
                                      ") serves " + pool +
                                      "; several servers of one pool need --etcd (docs/ha.md)");
    usleep(50 * 1000);
  }
  std::unique_ptr<HaMember> member(new HaMember(std::move(*device), *control));
  member->options_.pool = pool;
  member->options_.election.endpoint = endpoint;
  member->Announce();
  return member;
}

Result<std::unique_ptr<HaMember>> HaMember::FollowUntilLeading(const HaMemberOptions &options,
                                                               const sigset_t &stop) {
  Result<std::unique_ptr<PoolDevice>> device = PoolDevice::Open(options.pool, {});
  if (!device.ok()) return device.status();
  const Superblock sb = (*device)->superblock();
  Result<PoolControl> control = PoolControl::At((*device)->base(), sb);
  if (!control.ok()) return control.status();
  if (sb.log_bytes == 0)
    return Status::Error(EINVAL, options.pool +
                                     " has no replication log for standbys: format it with "
                                     "maructl mkpool --log-size SIZE");
  std::unique_ptr<HaMember> member(new HaMember(std::move(*device), *control));
  member->options_ = options;

  Result<std::unique_ptr<PoolLog>> log = PoolLog::Open(options.pool);
  if (!log.ok()) return log.status();
  Result<std::unique_ptr<MetaDb>> db = MetaDb::Open(options.db, options.sync_writes);
  if (!db.ok()) return db.status();
  (*log)->log().Authenticate(options.log_key);
  Standby standby(db->get(), &(*log)->log());
  MARU_RETURN_IF_ERROR(standby.Open());
  standby.Start();
  LOG_INFO("standby: following the leader of %s from log record %llu", options.pool.c_str(),
           static_cast<unsigned long long>(standby.applied().seq));

  ElectionOptions election = options.election;
  election.pool = UuidToString(sb.pool_uuid);
  std::atomic<uint64_t> elected{0};
  Leadership::Hooks hooks;
  hooks.on_lead = [&elected](uint64_t epoch) { elected.store(epoch); };
  hooks.on_lost = LoseLeadership;
  Result<std::unique_ptr<Leadership>> leadership =
      Leadership::Start(election, member->control_, &member->gate_, hooks);
  if (!leadership.ok()) {
    standby.Stop();
    return leadership.status();
  }
  member->leadership_ = std::move(*leadership);
  LagPublisher lag(&member->leadership_->election(), &standby);
  while (elected.load() == 0) {
    // A pool fenced past the epoch etcd gave: etcd is behind the pool, and
    // only an operator can say which is right. Refuse to lead.
    if (Status s = member->leadership_->status(); s.errnum() == ESTALE) {
      member->leadership_.reset();
      standby.Stop();
      return s;
    }
    lag.Tick();
    const timespec tick = {0, 20 * 1000 * 1000};
    if (sigtimedwait(&stop, nullptr, &tick) > 0) {
      member->leadership_.reset();
      standby.Stop();
      return std::unique_ptr<HaMember>();
    }
  }
  member->epoch_ = elected.load();
  // The pool is fenced at our epoch: the old leader's checks fail from
  // here on, so the log's head cannot move while we apply up to it.
  MARU_RETURN_IF_ERROR(standby.Promote());
  HaMember *m = member.get();
  member->lister_ = std::thread([m] { m->ListMembers(); });
  LOG_INFO("leading at epoch %llu from log record %llu",
           static_cast<unsigned long long>(member->epoch_),
           static_cast<unsigned long long>(standby.applied().seq));
  return member;  // the database closes here: the server opens it to lead
}

HaMember::~HaMember() {
  stop_.store(true);
  if (heartbeat_.joinable()) heartbeat_.join();
  if (lister_.joinable()) lister_.join();
}

std::vector<MemberInfo> HaMember::Members() const {
  MutexLock lock(&members_mu_);
  return members_;
}

void HaMember::ListMembers() {
  for (int64_t next = 0; !stop_.load(); usleep(100 * 1000)) {
    if (MonotonicMs() < next) continue;
    next = MonotonicMs() + 1000;
    Result<std::vector<MemberInfo>> members = leadership_->election().Members();
    if (!members.ok()) continue;  // etcd away: the last list stands
    MutexLock lock(&members_mu_);
    members_ = std::move(*members);
  }
}

void HaMember::Announce() {
  control_.SetLeader({0, ProcessId(), options_.election.endpoint, RealtimeNs()});
  heartbeat_ = std::thread([this] { Beat(); });
}

void HaMember::Beat() {
  while (!stop_.load()) {
    control_.Heartbeat(RealtimeNs());
    usleep(100 * 1000);
  }
}

}  // namespace maru
