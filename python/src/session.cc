#include "session.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>

#include "errors.h"

namespace maru_py {
namespace {

// This process's id, kept by a fork handler: Forked() runs on every chunk
// call and every release, and getpid() is a system call each time.
std::atomic<pid_t> this_process{0};

pid_t ThisProcess() {
  static const bool watched = [] {
    this_process = getpid();
    pthread_atfork(nullptr, nullptr, [] { this_process = getpid(); });
    return true;
  }();
  (void)watched;
  return this_process.load(std::memory_order_relaxed);
}

}  // namespace

int Session::Connect(const std::optional<std::string> &target,
                     const std::optional<std::string> &instance, std::shared_ptr<Session> *out) {
  maru_connect_opts_t opts{};
  opts.instance = instance ? instance->c_str() : nullptr;
  maru_t *m = nullptr;
  int rc = maru_connect_ex(target ? target->c_str() : nullptr, &opts, &m);
  if (rc < 0) return rc;
  out->reset(new Session(m, ThisProcess()));
  return 0;
}

Session::~Session() {
  // A forked child leaves the parent's session alone.
  if (!Forked()) maru_disconnect(m_);
}

bool Session::Forked() const {
  return ThisProcess() != pid_;
}

void Session::CheckFork() const {
  if (Forked())
    throw ForkError("maru: this connection was made in process " + std::to_string(pid_) +
                    "; connections and chunks do not survive fork(). Connect in the new "
                    "process after exec (multiprocessing 'spawn' or 'forkserver', or "
                    "fork+exec) instead");
}

}  // namespace maru_py
