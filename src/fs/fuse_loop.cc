#include "fs/fuse_loop.h"

#include <linux/fuse.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <memory>

#include "util/cpu_wake_latency.h"
#include "util/log.h"

namespace maru {
namespace {

// Set while a thread that must not wait runs a handler: where HandToWorker
// says that it did.
thread_local bool *t_handed = nullptr;

}  // namespace

bool ServedInline(uint32_t opcode) {
  switch (opcode) {
    case FUSE_READ:
    case FUSE_WRITE:
    case FUSE_FORGET:
    case FUSE_BATCH_FORGET:
    case FUSE_INTERRUPT:
      return true;
    default:
      return false;
  }
}

bool MustNotWait() {
  return t_handed != nullptr;
}

void HandToWorker(fuse_req_t req) {
  if (!t_handed) {  // a handler's mistake: answer rather than lose the request
    LOG_ERROR("a request was handed on from a thread that may wait");
    return (void)fuse_reply_err(req, EIO);
  }
  *t_handed = true;
  // Freed without a reply: libfuse forgets it, the kernel still waits for
  // it, and the worker's processing makes a new one of the same id.
  fuse_reply_none(req);
}

bool ProcessWithoutWaiting(fuse_session *se, const fuse_buf &buf) {
  bool handed = false;
  t_handed = &handed;
  fuse_buf copy = buf;
  fuse_session_process_buf(se, &copy);
  t_handed = nullptr;
  return !handed;
}

FuseWorkers::FuseWorkers(fuse_session *se, unsigned n) : se_(se) {
  SignalsBlocked blocked;
  for (unsigned i = 0; i < std::max(n, 1u); ++i) threads_.emplace_back([this] { Run(); });
}

FuseWorkers::~FuseWorkers() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  for (std::thread &t : threads_) t.join();
}

void FuseWorkers::Push(const fuse_buf &buf) {
  const char *mem = static_cast<const char *>(buf.mem);
  auto request = std::make_shared<std::vector<char>>(mem, mem + buf.size);
  fuse_session *se = se_;
  Push([se, request] {
    fuse_buf copy{};
    copy.mem = request->data();
    copy.size = request->size();
    fuse_session_process_buf(se, &copy);
  });
}

void FuseWorkers::Push(std::function<void()> job) {
  {
    MutexLock lock(&mu_);
    queue_.push_back(std::move(job));
  }
  cv_.Signal();
}

void FuseWorkers::Run() {
  for (;;) {
    std::function<void()> job;
    {
      MutexLock lock(&mu_);
      while (!stop_ && queue_.empty()) cv_.Wait(&mu_);
      if (stop_) return;  // what is queued fails with the unmount
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();
  }
}

SignalsBlocked::SignalsBlocked() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &saved_);
}

SignalsBlocked::~SignalsBlocked() {
  pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
}

int RunFuseLoop(fuse_session *se, FuseWorkers *workers, CpuWakeLatency *wake) {
  fuse_buf buf{};
  int rc = 0;
  while (!fuse_session_exited(se)) {
    rc = fuse_session_receive_buf(se, &buf);
    if (rc == -EINTR) continue;
    if (rc <= 0) break;  // 0: unmounted, or a signal ended the session
    wake->NoteRequest();
    const auto *in = static_cast<const fuse_in_header *>(buf.mem);
    if (!ServedInline(in->opcode)) {
      workers->Push(buf);
      continue;
    }
    // libfuse reads the request in place and leaves its bytes as they were:
    // one handed on is served again from them.
    if (!ProcessWithoutWaiting(se, buf)) workers->Push(buf);
  }
  free(buf.mem);
  // The kernel aborts the connection when a lazily unmounted mount's last
  // user goes while requests are still queued: the mount is gone, as with
  // ENODEV (libfuse turns only that one into an end).
  if (rc == -ECONNABORTED) return 0;
  return rc < 0 ? rc : 0;
}

}  // namespace maru
