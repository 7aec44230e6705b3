#include "rdma/ucx_worker.h"

#include <poll.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>

#include "util/clock.h"
#include "util/log.h"

namespace maru {

int UcsErrno(ucs_status_t status) {
  switch (status) {
    case UCS_OK:
      return 0;
    case UCS_ERR_NO_MEMORY:
      return ENOMEM;
    case UCS_ERR_INVALID_PARAM:
      return EINVAL;
    case UCS_ERR_TIMED_OUT:
      return ETIMEDOUT;
    case UCS_ERR_CANCELED:
      return ECANCELED;
    case UCS_ERR_UNREACHABLE:
      return EHOSTUNREACH;
    case UCS_ERR_REJECTED:
      return ECONNREFUSED;
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
      return ECONNRESET;
    default:
      return EIO;
  }
}

namespace {

// UCX's TCP transport sends in 8 KiB segments by default: a 32 MiB get or
// put is 4096 of them, each a trip through UCX's progress on both sides.
// Larger ones measured 1.5-3x the bandwidth on loopback (docs/benchmarks.md).
// UCX 1.13 does not negotiate them, and aborts a receiver that gets a
// segment larger than its own receive size (64 KiB by default): so segments
// sent are at most that default, and those accepted larger, whatever the
// peer's version or settings. Applied unless the environment sets them.
constexpr std::pair<const char *, const char *> kTcpSegments[] = {{"TX_SEG_SIZE", "64kb"},
                                                                  {"RX_SEG_SIZE", "256kb"}};

void TuneTransports(ucp_config_t *config) {
  // UCX applies a modified transport option by its name within the
  // transport's table (no "TCP_" prefix); only TCP has these two.
  for (const auto &[name, value] : kTcpSegments) {
    if (getenv((std::string("UCX_TCP_") + name).c_str())) continue;
    if (ucs_status_t st = ucp_config_modify(config, name, value); st != UCS_OK)
      LOG_DEBUG("cannot set UCX TCP_%s: %s", name, ucs_status_string(st));
  }
}

}  // namespace

Result<std::unique_ptr<UcxWorker>> UcxWorker::Create(bool rma) {
  std::unique_ptr<UcxWorker> w(new UcxWorker());
  ucp_config_t *config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return Status::Error(UcsErrno(st), "cannot read the UCX configuration");
  TuneTransports(config);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = (rma ? UCP_FEATURE_RMA : 0) | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  st = ucp_init(&params, config, &w->context_);
  ucp_config_release(config);
  if (st != UCS_OK)
    return Status::Error(UcsErrno(st), std::string("ucp_init: ") + ucs_status_string(st));
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  st = ucp_worker_create(w->context_, &wp, &w->worker_);
  if (st != UCS_OK)
    return Status::Error(UcsErrno(st), std::string("ucp_worker_create: ") + ucs_status_string(st));
  return w;
}

UcxWorker::~UcxWorker() {
  if (worker_) ucp_worker_destroy(worker_);
  if (context_) ucp_cleanup(context_);
}

Status UcxWorker::SetHandler(unsigned id, ucp_am_recv_callback_t cb, void *arg) {
  ucp_am_handler_param_t am{};
  am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG;
  am.id = id;
  am.cb = cb;
  am.arg = arg;
  ucs_status_t st = ucp_worker_set_am_recv_handler(worker_, &am);
  if (st != UCS_OK) return Status::Error(UcsErrno(st), "cannot set an active message handler");
  return Status::Ok();
}

void UcxWorker::Sleep(int timeout_ms) {
  int efd = -1;
  if (ucp_worker_get_efd(worker_, &efd) != UCS_OK) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return;
  }
  if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) return;  // events are waiting already
  pollfd p{efd, POLLIN, 0};
  poll(&p, 1, timeout_ms);
}

void UcxWorker::Progress() {
  while (ucp_worker_progress(worker_) != 0) {
  }
}

bool UcxWorker::ProgressUntil(const std::function<bool()> &done, int64_t timeout_ms) {
  const int64_t deadline = DeadlineAfterMs(timeout_ms);
  unsigned idle = 0;
  while (!done()) {
    if (ucp_worker_progress(worker_) == 0) {
      if (DeadlinePassed(deadline)) return false;
      // Spin briefly, then yield: completions come from the network.
      if (++idle > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else {
      idle = 0;
    }
  }
  return true;
}

ucs_status_t UcxWorker::Wait(void *request, int64_t timeout_ms,
                             const std::function<void()> &abandon) {
  if (request == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
  auto done = [&] { return ucp_request_check_status(request) != UCS_INPROGRESS; };
  const bool finished = ProgressUntil(done, timeout_ms);
  if (!finished) {
    if (abandon) {
      abandon();
      // UCX may still use the request's buffer until it says it is done;
      // closing its endpoint makes it finish.
      while (!ProgressUntil(done, 10000))
        LOG_WARN("a UCX request is still running after it was abandoned; waiting");
    } else {
      ucp_request_cancel(worker_, request);
      if (!ProgressUntil(done, 10000)) {
        // Never free a running request: leak it rather than hang.
        LOG_ERROR("a UCX request did not finish after it was cancelled; leaving it");
        return UCS_ERR_TIMED_OUT;
      }
    }
  }
  const ucs_status_t st = ucp_request_check_status(request);
  ucp_request_free(request);
  return finished ? st : UCS_ERR_TIMED_OUT;
}

}  // namespace maru
