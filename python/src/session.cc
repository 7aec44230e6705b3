#include "session.h"

#include <unistd.h>

#include "errors.h"

namespace maru_py {

int Session::Connect(const std::optional<std::string> &target,
                     const std::optional<std::string> &instance, std::shared_ptr<Session> *out) {
  maru_connect_opts_t opts{};
  opts.instance = instance ? instance->c_str() : nullptr;
  maru_t *m = nullptr;
  int rc = maru_connect_ex(target ? target->c_str() : nullptr, &opts, &m);
  if (rc < 0) return rc;
  out->reset(new Session(m, getpid()));
  return 0;
}

Session::~Session() {
  // A forked child leaves the parent's session alone.
  if (!Forked()) maru_disconnect(m_);
}

bool Session::Forked() const {
  return getpid() != pid_;
}

void Session::CheckFork() const {
  if (Forked())
    throw ForkError("maru: this connection was made in process " + std::to_string(pid_) +
                    "; connections and chunks do not survive fork(). Connect in the new "
                    "process after exec (multiprocessing 'spawn' or 'forkserver', or "
                    "fork+exec) instead");
}

}  // namespace maru_py
