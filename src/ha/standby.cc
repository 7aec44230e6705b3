#include "ha/standby.h"

#include <cerrno>
#include <chrono>

#include "util/log.h"

namespace maru {
namespace {

// How often an idle standby looks at the log's head: a record is seen
// within this, far under the failover's budget, for a load that is a few
// cache-line reads.
constexpr auto kPollInterval = std::chrono::microseconds(500);

}  // namespace

Standby::Standby(MetaDb *db, OpLog *log) : db_(db), log_(log) {}

Standby::~Standby() {
  Stop();
}

Status Standby::Open() {
  Result<OpLogPosition> at = db_->LogPosition();
  if (!at.ok()) return at.status();
  MutexLock lock(&mu_);
  at_ = *at;
  stuck_ = Status::Ok();
  return Status::Ok();
}

// One record: read, verified, written with its position. `applied` says
// whether there was one.
Status Standby::ApplyNext(bool *applied) {
  *applied = false;
  OpLogPosition at;
  uint64_t last_epoch;
  {
    MutexLock lock(&mu_);
    if (!stuck_.ok()) return stuck_;
    at = at_;
    last_epoch = last_epoch_;
  }
  Result<OpLogRecord> rec = log_->ReadNext(at);
  Status s = rec.status();
  if (rec.ok() && rec->epoch < last_epoch)
    s = Status::Error(EBADMSG, "a replication log record of an older epoch than the one before");
  if (s.ok()) {
    const OpLogPosition next{rec->generation, rec->seq, rec->next_pos};
    s = db_->ApplyLogged(*rec, next);
    if (s.ok()) {
      MutexLock lock(&mu_);
      at_ = next;
      last_epoch_ = rec->epoch;
      *applied = true;
      return s;
    }
  }
  if (s.errnum() == ENODATA) return Status::Ok();
  MutexLock lock(&mu_);
  if (stuck_.ok()) {
    LOG_WARN("standby: stopped at seq %llu: %s", static_cast<unsigned long long>(at_.seq),
             s.ToString().c_str());
    stuck_ = s;
  }
  return s;
}

Status Standby::CatchUp() {
  for (;;) {
    bool applied = false;
    MARU_RETURN_IF_ERROR(ApplyNext(&applied));
    if (!applied) return Status::Ok();
  }
}

void Standby::Tail() {
  for (;;) {
    (void)CatchUp();  // an error is kept in stuck_, and reported by lag()
    MutexLock lock(&mu_);
    if (stop_) return;
    stop_cv_.WaitUntil(&mu_, std::chrono::steady_clock::now() + kPollInterval);
    if (stop_) return;
  }
}

void Standby::Start() {
  {
    MutexLock lock(&mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] { Tail(); });
}

void Standby::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    stop_cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

Status Standby::Promote() {
  Stop();
  MARU_RETURN_IF_ERROR(CatchUp());
  MutexLock lock(&mu_);
  LOG_INFO("standby: promoted at seq %llu", static_cast<unsigned long long>(at_.seq));
  return Status::Ok();
}

Status Standby::Bootstrap(const std::vector<std::pair<std::string, std::string>> &records) {
  MARU_RETURN_IF_ERROR(db_->ReplaceWith(records));
  return Open();
}

OpLogPosition Standby::applied() const {
  MutexLock lock(&mu_);
  return at_;
}

Standby::Lag Standby::lag() const {
  Lag lag;
  const OpLogPosition head = log_->Head();
  MutexLock lock(&mu_);
  if (head.generation == at_.generation || at_.generation == 0) {
    if (head.seq > at_.seq) lag.records = head.seq - at_.seq;
    if (head.pos > at_.pos) lag.bytes = head.pos - at_.pos;
  }
  lag.behind = stuck_.errnum() == ESTALE;
  if (!stuck_.ok()) lag.error = lag.behind ? "behind: needs a snapshot" : stuck_.ToString();
  return lag;
}

bool Standby::electable() const {
  MutexLock lock(&mu_);
  return stuck_.ok();
}

}  // namespace maru
