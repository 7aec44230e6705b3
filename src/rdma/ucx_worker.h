// A UCX context and worker, the pieces both maru-agent and remote clients
// need: one-sided RMA plus active messages. The owner serializes access
// (UCS_THREAD_MODE_SERIALIZED).
#pragma once

#include <ucp/api/ucp.h>

#include <functional>
#include <memory>

#include "util/status.h"

namespace maru {

// Maps a UCX status to a positive errno.
int UcsErrno(ucs_status_t status);

class UcxWorker {
 public:
  // `rma`: whether peers may reach this process's memory one-sided. Without
  // it UCX installs no handlers for the get/put it emulates over TCP.
  static Result<std::unique_ptr<UcxWorker>> Create(bool rma = true);
  ~UcxWorker();
  UcxWorker(const UcxWorker &) = delete;
  UcxWorker &operator=(const UcxWorker &) = delete;

  ucp_context_h context() const { return context_; }
  ucp_worker_h worker() const { return worker_; }

  // Drives communication until nothing more happens right now.
  void Progress();
  // Waits for a request returned by a *_nbx call; NULL means it already
  // completed. After `timeout_ms` it calls `abandon` (which must make UCX
  // finish the request, e.g. by closing its endpoint) and returns
  // UCS_ERR_TIMED_OUT once the request is finished: its buffer is no longer
  // in use. Without `abandon` it cancels the request, which UCX may not
  // honour for every kind: pass `abandon` when the buffer is freed after.
  ucs_status_t Wait(void *request, int64_t timeout_ms, const std::function<void()> &abandon = {});
  // Progresses until `done` holds or `timeout_ms` passes.
  bool ProgressUntil(const std::function<bool()> &done, int64_t timeout_ms);
  // Sleeps until the network has something for this worker, or `timeout_ms`.
  void Sleep(int timeout_ms);
  // Routes active messages with `id` to `cb(arg, ...)`.
  Status SetHandler(unsigned id, ucp_am_recv_callback_t cb, void *arg);

 private:
  UcxWorker() = default;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
};

}  // namespace maru
