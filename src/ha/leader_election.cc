#include "ha/leader_election.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdlib>

#include "util/clock.h"
#include "util/log.h"

namespace maru {
namespace {

// "name=value" lines; the value of `name`, or nullopt.
std::optional<std::string> Field(const std::string &text, const std::string &name) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    if (text.compare(pos, name.size() + 1, name + "=") == 0)
      return text.substr(pos + name.size() + 1, end - pos - name.size() - 1);
    pos = end + 1;
  }
  return std::nullopt;
}

std::optional<int64_t> Number(const std::optional<std::string> &s) {
  if (!s || s->empty() || s->size() > 20) return std::nullopt;
  char *end = nullptr;
  const long long v = strtoll(s->c_str(), &end, 10);
  if (*end != '\0' || v < 0) return std::nullopt;
  return v;
}

bool OneLine(const std::string &s) {
  return s.find_first_of("\n\r") == std::string::npos;
}

}  // namespace

std::optional<LeaderInfo> LeaderElection::ParseLeader(const std::string &value) {
  LeaderInfo info;
  std::optional<std::string> id = Field(value, "id"), endpoint = Field(value, "endpoint");
  std::optional<int64_t> epoch = Number(Field(value, "epoch"));
  if (!id || !endpoint || !epoch) return std::nullopt;
  info.id = *id;
  info.endpoint = *endpoint;
  info.epoch = static_cast<uint64_t>(*epoch);
  return info;
}

std::optional<MemberInfo> LeaderElection::ParseMember(const std::string &id,
                                                      const std::string &value) {
  MemberInfo m;
  std::optional<std::string> endpoint = Field(value, "endpoint");
  std::optional<int64_t> lag = Number(Field(value, "lag"));
  std::optional<std::string> electable = Field(value, "electable");
  if (!endpoint || !lag || !electable) return std::nullopt;
  m.id = id;
  m.endpoint = *endpoint;
  m.lag = *lag;
  m.electable = *electable == "1";
  return m;
}

LeaderElection::LeaderElection(ElectionOptions options, std::unique_ptr<EtcdClient> etcd)
    : options_(std::move(options)), etcd_(std::move(etcd)) {}

Result<std::unique_ptr<LeaderElection>> LeaderElection::Start(const ElectionOptions &options) {
  if (options.pool.empty() || options.id.empty())
    return Status::Error(EINVAL, "election: pool and member id are required");
  if (!OneLine(options.id) || options.id.find('/') != std::string::npos ||
      !OneLine(options.endpoint) || !OneLine(options.pool) ||
      options.pool.find('/') != std::string::npos)
    return Status::Error(EINVAL, "election: pool, id and endpoint must be one line without '/'");
  if (options.ttl_s <= 0) return Status::Error(EINVAL, "election: the lease TTL must be > 0");
  EtcdOptions etcd_options = options.etcd;
  // A renewal that takes longer than half the TTL is as good as lost.
  etcd_options.call_timeout_ms = std::min(etcd_options.call_timeout_ms, options.ttl_s * 500);
  Result<std::unique_ptr<EtcdClient>> etcd = EtcdClient::Create(etcd_options);
  if (!etcd.ok()) return etcd.status();
  // Renewals get a shorter deadline of their own: one that hangs must leave
  // time to try again before the lease is in doubt.
  etcd_options.call_timeout_ms = std::max<int64_t>(options.ttl_s * 250, 100);
  Result<std::unique_ptr<EtcdClient>> keepalive_etcd = EtcdClient::Create(etcd_options);
  if (!keepalive_etcd.ok()) return keepalive_etcd.status();
  std::unique_ptr<LeaderElection> e(new LeaderElection(options, std::move(*etcd)));
  e->keepalive_etcd_ = std::move(*keepalive_etcd);
  MARU_RETURN_IF_ERROR(e->Register());
  e->keepalive_ = std::thread([p = e.get()] { p->KeepAlive(); });
  e->watchdog_ = std::thread([p = e.get()] { p->Watchdog(); });
  return e;
}

LeaderElection::~LeaderElection() {
  Stop();
  if (keepalive_.joinable()) keepalive_.join();
  if (watchdog_.joinable()) watchdog_.join();
  int64_t lease;
  {
    MutexLock l(&mu_);
    lease = lease_;
  }
  leading_.store(false);
  // Best effort: unreachable etcd expires it after the TTL anyway.
  if (lease != 0) etcd_->LeaseRevoke(lease);
}

std::string LeaderElection::MemberValue() const {
  return "endpoint=" + options_.endpoint + "\nlag=" + std::to_string(lag_) +
         "\nelectable=" + (electable_ ? "1" : "0") + "\n";
}

Status LeaderElection::Register() {
  const int64_t sent = MonotonicMs();
  Result<EtcdLease> lease = etcd_->LeaseGrant(options_.ttl_s);
  if (!lease.ok()) return lease.status();
  std::string value;
  {
    MutexLock l(&mu_);
    value = MemberValue();
  }
  Status s = etcd_->Put(MemberKey(), value, lease->id);
  if (!s.ok()) {
    etcd_->LeaseRevoke(lease->id);
    return s;
  }
  const int64_t ttl_ms = lease->ttl_s * 1000;
  ttl_ms_.store(ttl_ms);
  margin_ms_.store(options_.margin_ms > 0 ? std::min(options_.margin_ms, ttl_ms - 1) : ttl_ms / 4);
  confirmed_ms_.store(sent);
  MutexLock l(&mu_);
  lease_ = lease->id;
  return Status::Ok();
}

Status LeaderElection::SetLag(int64_t lag, bool electable) {
  int64_t lease;
  std::string value;
  {
    MutexLock l(&mu_);
    lag_ = lag < 0 ? 0 : lag;
    electable_ = electable;
    lease = lease_;
    value = MemberValue();
    cv_.SignalAll();
  }
  if (lease == 0) return Status::Ok();  // published when it registers again
  return etcd_->Put(MemberKey(), value, lease);
}

int64_t LeaderElection::HeldUntilMs() const {
  return confirmed_ms_.load(std::memory_order_acquire) + ttl_ms_.load(std::memory_order_relaxed) -
         margin_ms_.load(std::memory_order_relaxed);
}

bool LeaderElection::Leading() const {
  return leading_.load(std::memory_order_acquire) && MonotonicMs() < HeldUntilMs();
}

void LeaderElection::Lose() {
  if (leading_.exchange(false) && options_.on_lost) options_.on_lost();
}

bool LeaderElection::Pause(int64_t ms) {
  MutexLock l(&mu_);
  if (stopped_) return false;
  cv_.WaitUntil(&mu_, std::chrono::steady_clock::now() + std::chrono::milliseconds(ms));
  return !stopped_;
}

void LeaderElection::Stop() {
  MutexLock l(&mu_);
  stopped_ = true;
  cv_.SignalAll();
}

void LeaderElection::KeepAlive() {
  // Renews five times a TTL, and soon again after a failure: etcd may be
  // without a raft leader for a moment (a member lost), and the renewal
  // that gets through after it must come before TTL - margin.
  bool failed = false;
  while (Pause(failed ? std::max<int64_t>(ttl_ms_.load() / 40, 5) : ttl_ms_.load() / 5)) {
    int64_t lease;
    {
      MutexLock l(&mu_);
      lease = lease_;
    }
    // None while it expired: the next campaign registers again. A leader
    // that lost its lease never gets it back.
    if (lease == 0) continue;
    const int64_t sent = MonotonicMs();
    Result<int64_t> ttl = keepalive_etcd_->LeaseKeepAlive(lease);
    failed = !ttl.ok();
    if (ttl.ok()) {
      confirmed_ms_.store(sent, std::memory_order_release);
      renewals_.fetch_add(1);
    } else if (ttl.status().errnum() == ENOENT) {
      Lose();
      MutexLock l(&mu_);
      if (lease_ == lease) lease_ = 0;
    }
  }
}

void LeaderElection::Watchdog() {
  for (;;) {
    {
      MutexLock l(&mu_);
      if (stopped_) return;
      // Wakes often enough to act within a few ms of the deadline, whatever
      // renewals move it meanwhile.
      const int64_t left = HeldUntilMs() - MonotonicMs();
      const int64_t wait = leading_.load() ? std::clamp<int64_t>(left, 1, 5) : 20;
      cv_.WaitUntil(&mu_, std::chrono::steady_clock::now() + std::chrono::milliseconds(wait));
      if (stopped_) return;
    }
    if (leading_.load() && MonotonicMs() >= HeldUntilMs()) {
      Lose();
      MutexLock l(&mu_);
      lease_ = 0;  // the next campaign registers anew
    }
  }
}

Result<uint64_t> LeaderElection::TryAcquire(std::string *seen) {
  int64_t lease;
  std::string member;
  {
    MutexLock l(&mu_);
    lease = lease_;
    member = MemberValue();
  }
  if (lease == 0) {
    MARU_RETURN_IF_ERROR(Register());
    MutexLock l(&mu_);
    lease = lease_;
  }
  Result<EtcdKeyValue> epoch_kv = etcd_->Get(EpochKey());
  if (!epoch_kv.ok()) return epoch_kv.status();
  uint64_t last = 0;
  if (epoch_kv->version != 0) {
    std::optional<int64_t> n = Number(epoch_kv->value);
    if (!n) return Status::Error(EINVAL, "etcd: " + EpochKey() + " holds no number");
    last = static_cast<uint64_t>(*n);
  }
  const uint64_t next = last + 1;
  const std::string leader = "id=" + options_.id + "\nendpoint=" + options_.endpoint +
                             "\nepoch=" + std::to_string(next) + "\n";
  std::vector<EtcdCompare> cmp(3);
  cmp[0].key = LeaderKey();  // no one leads
  cmp[0].target = EtcdCompare::kVersion;
  cmp[0].number = 0;
  cmp[1].key = EpochKey();  // the epoch is the one read
  cmp[1].target = EtcdCompare::kMod;
  cmp[1].number = epoch_kv->mod_revision;
  cmp[2].key = MemberKey();  // our lease still holds
  cmp[2].target = EtcdCompare::kLease;
  cmp[2].number = lease;
  std::vector<EtcdOp> success(2);
  success[0].kind = EtcdOp::kPut;
  success[0].key = LeaderKey();
  success[0].value = leader;
  success[0].lease = lease;
  success[1].kind = EtcdOp::kPut;
  success[1].key = EpochKey();
  success[1].value = std::to_string(next);
  EtcdOp who;
  who.key = LeaderKey();
  Result<EtcdTxnResult> txn = etcd_->Txn(cmp, success, {who});
  if (!txn.ok()) return txn.status();
  if (!txn->succeeded) {
    seen->clear();
    if (txn->gets.empty() || txn->gets[0].empty()) return uint64_t{0};
    const EtcdKeyValue &holder = txn->gets[0][0];
    *seen = holder.value;
    std::optional<LeaderInfo> info = ParseLeader(holder.value);
    if (info && holder.lease != lease && options_.leader_is_silent &&
        options_.leader_is_silent(*info)) {
      LOG_WARN("election: leader %s (epoch %lu) went silent: revoking its lease", info->id.c_str(),
               info->epoch);
      Status revoked = etcd_->LeaseRevoke(holder.lease);
      if (!revoked.ok() && revoked.errnum() != ENOENT) return revoked;
      return TryAcquire(seen);  // once: a vacant key now, or someone else was quicker
    }
    return uint64_t{0};
  }
  epoch_.store(next, std::memory_order_release);
  leading_.store(true, std::memory_order_release);
  return next;
}

Result<uint64_t> LeaderElection::Campaign() {
  int64_t failing_since = 0;
  Status last;
  std::string last_seen;
  for (;;) {
    bool electable;
    {
      MutexLock l(&mu_);
      if (stopped_) return Status::Error(ECANCELED, "election stopped");
      electable = electable_;
    }
    if (electable) {
      std::string seen;
      Result<uint64_t> r = TryAcquire(&seen);
      if (r.ok() && *r != 0) return *r;
      if (r.ok()) {
        failing_since = 0;
        if (seen != last_seen && options_.on_leader_seen) {
          last_seen = seen;
          options_.on_leader_seen(ParseLeader(seen).value_or(LeaderInfo()));
        }
      } else {
        last = r.status();
        if (failing_since == 0) failing_since = MonotonicMs();
        if (MonotonicMs() - failing_since >= options_.give_up_ms)
          return Status::Error(last.errnum(), "campaign gave up: " + last.message());
      }
    }
    if (!Pause(options_.poll_ms)) return Status::Error(ECANCELED, "election stopped");
  }
}

Status LeaderElection::Resign() {
  int64_t lease;
  {
    MutexLock l(&mu_);
    lease = lease_;
  }
  leading_.store(false);
  if (lease == 0) return Status::Ok();
  EtcdCompare ours;
  ours.key = LeaderKey();
  ours.target = EtcdCompare::kLease;
  ours.number = lease;
  EtcdOp del;
  del.kind = EtcdOp::kDelete;
  del.key = LeaderKey();
  Result<EtcdTxnResult> txn = etcd_->Txn({ours}, {del}, {});
  return txn.ok() ? Status::Ok() : txn.status();
}

Result<std::optional<LeaderInfo>> LeaderElection::ReadLeader(EtcdClient *etcd,
                                                             const std::string &pool) {
  Result<EtcdKeyValue> kv = etcd->Get(Prefix(pool) + "leader");
  if (!kv.ok()) return kv.status();
  if (kv->version == 0) return std::optional<LeaderInfo>();
  return ParseLeader(kv->value);
}

Result<std::vector<MemberInfo>> LeaderElection::ReadMembers(EtcdClient *etcd,
                                                            const std::string &pool) {
  const std::string prefix = Prefix(pool) + "members/";
  Result<std::vector<EtcdKeyValue>> kvs = etcd->GetPrefix(prefix);
  if (!kvs.ok()) return kvs.status();
  std::vector<MemberInfo> out;
  for (const EtcdKeyValue &kv : *kvs) {
    std::optional<MemberInfo> m = ParseMember(kv.key.substr(prefix.size()), kv.value);
    if (m) out.push_back(std::move(*m));
  }
  return out;
}

}  // namespace maru
