#include "shared_connection.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <new>

#include "errors.h"

namespace maru_py {
namespace {

// Forked() runs on every chunk call and every release, where a getpid()
// system call each time cost a third of a release. Instead the pid of the
// process that connected is kept in a page the kernel zeroes in every child
// it forks (MADV_WIPEONFORK): a raw fork() or clone() system call too,
// which runs no atfork handler. A child that connects marks the page anew.
// Null where the kernel lacks it (before Linux 4.14): then getpid().
std::atomic<pid_t> *ProcessMark() {
  static std::atomic<pid_t> *const mark = []() -> std::atomic<pid_t> * {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void *p = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    if (madvise(p, page, MADV_WIPEONFORK) != 0) {
      munmap(p, page);
      return nullptr;
    }
    return new (p) std::atomic<pid_t>(0);
  }();
  return mark;
}

// At connect: this process's id, marked as the one whose connections these are.
pid_t MarkThisProcess() {
  const pid_t pid = getpid();
  if (std::atomic<pid_t> *mark = ProcessMark()) mark->store(pid, std::memory_order_relaxed);
  return pid;
}

}  // namespace

int SharedConnection::Connect(const std::optional<std::string> &target,
                              const std::optional<std::string> &instance,
                              std::shared_ptr<SharedConnection> *out) {
  maru_connect_opts_t opts{};
  opts.instance = instance ? instance->c_str() : nullptr;
  maru_t *m = nullptr;
  int rc = maru_connect_ex(target ? target->c_str() : nullptr, &opts, &m);
  if (rc < 0) return rc;
  out->reset(new SharedConnection(m, MarkThisProcess()));
  return 0;
}

SharedConnection::~SharedConnection() {
  // A forked child leaves the parent's connection alone.
  if (!Forked()) maru_disconnect(m_);
}

bool SharedConnection::Forked() const {
  const std::atomic<pid_t> *mark = ProcessMark();
  return (mark ? mark->load(std::memory_order_relaxed) : getpid()) != pid_;
}

void SharedConnection::CheckFork() const {
  if (Forked())
    throw ForkError("maru: this connection was made in process " + std::to_string(pid_) +
                    "; connections and chunks do not survive fork(). Connect in the new "
                    "process after exec (multiprocessing 'spawn' or 'forkserver', or "
                    "fork+exec) instead");
}

}  // namespace maru_py
