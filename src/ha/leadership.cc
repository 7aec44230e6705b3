#include "ha/leadership.h"

#include <chrono>

#include "util/clock.h"
#include "util/log.h"

namespace maru {
Leadership::Leadership(const ElectionOptions &options, PoolControl control, LeaderGate *gate,
                       Hooks hooks)
    : options_(options), control_(control), gate_(gate), hooks_(std::move(hooks)) {}

Result<std::unique_ptr<Leadership>> Leadership::Start(const ElectionOptions &options,
                                                      PoolControl control, LeaderGate *gate,
                                                      Hooks hooks) {
  std::unique_ptr<Leadership> l(new Leadership(options, control, gate, std::move(hooks)));
  ElectionOptions e = options;
  Leadership *self = l.get();
  // Runs on the election's watchdog the moment the lease is in doubt:
  // before anyone else can be elected, nothing more is answered.
  e.on_lost = [self] {
    self->epoch_.store(0, std::memory_order_release);
    self->gate_->Follow("");
    if (self->hooks_.on_lost) self->hooks_.on_lost();
  };
  e.leader_is_silent = [self](const LeaderInfo &leader) { return self->LeaderSilent(leader); };
  e.on_leader_seen = [self](const LeaderInfo &leader) {
    if (self->epoch() == 0) self->gate_->Follow(leader.endpoint);
  };
  gate->Follow("");
  Result<std::unique_ptr<LeaderElection>> election = LeaderElection::Start(e);
  if (!election.ok()) return election.status();
  l->election_ = std::move(*election);
  l->thread_ = std::thread([self] { self->Run(); });
  return l;
}

Leadership::~Leadership() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cv_.SignalAll();
  }
  if (election_) election_->Stop();
  if (thread_.joinable()) thread_.join();
  epoch_.store(0);
  gate_->Follow("");
  election_.reset();  // revokes the lease: a standby takes over at once
}

bool Leadership::MayWrite() const {
  const uint64_t e = epoch();
  return e != 0 && election_->Leading() && control_.Holds(e);
}

Status Leadership::status() const {
  MutexLock lock(&mu_);
  return status_;
}

void Leadership::SetStatus(Status s) {
  MutexLock lock(&mu_);
  status_ = std::move(s);
}

bool Leadership::Pause(int64_t ms) {
  MutexLock lock(&mu_);
  if (stopping_) return false;
  cv_.WaitUntil(&mu_, std::chrono::steady_clock::now() + std::chrono::milliseconds(ms));
  return !stopping_;
}

bool Leadership::LeaderSilent(const LeaderInfo &leader) {
  if (options_.silence_ms <= 0) return false;
  const LeaderRecord record = control_.Leader();
  const int64_t now = MonotonicMs();
  if (record.epoch != leader.epoch) {  // its record is not in the pool yet
    seen_ = {};
    return false;
  }
  if (seen_.epoch != record.epoch || seen_.beat_ns != record.heartbeat_ns) {
    seen_ = {record.epoch, record.heartbeat_ns, now};
    return false;
  }
  return now - seen_.changed_ms >= options_.silence_ms;
}

void Leadership::Run() {
  for (;;) {
    Result<uint64_t> epoch = election_->Campaign();
    if (!epoch.ok()) {
      if (epoch.status().errnum() == ECANCELED) return;
      LOG_ERROR("election: %s", epoch.status().ToString().c_str());
      SetStatus(epoch.status());
      if (!Pause(election_->ttl_ms())) return;
      continue;
    }
    Status raised = control_.RaiseFence(*epoch);
    if (!raised.ok()) {
      LOG_ERROR("refusing to lead: %s", raised.ToString().c_str());
      SetStatus(raised);
      election_->Resign();
      return;
    }
    SetStatus(Status::Ok());
    Lead(*epoch);
  }
}

void Leadership::Lead(uint64_t epoch) {
  control_.SetLeader(LeaderRecord{epoch, options_.id, options_.endpoint, RealtimeNs()});
  epoch_.store(epoch, std::memory_order_release);
  gate_->Lead(epoch);
  LOG_INFO("leading the pool with epoch %lu", epoch);
  if (hooks_.on_lead) hooks_.on_lead(epoch);
  while (Pause(std::max<int64_t>(election_->ttl_ms() / 10, 1))) {
    if (!election_->Leading()) break;  // on_lost closed the gate
    if (!control_.Holds(epoch)) {
      // A newer leader fenced us out while our lease still looked fine to
      // us (our clock, or etcd, was wrong): step down now.
      LOG_ERROR("the pool was fenced past epoch %lu: stepping down", epoch);
      epoch_.store(0, std::memory_order_release);
      gate_->Follow("");
      election_->Resign();
      if (hooks_.on_lost) hooks_.on_lost();
      return;
    }
    control_.Heartbeat(RealtimeNs());
  }
}

}  // namespace maru
