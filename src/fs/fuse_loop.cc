#include "fs/fuse_loop.h"

#include <linux/fuse.h>
#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace maru {
namespace {

// Served by the reading thread: they never wait on the server (a write
// but for growing its reservation), and a write's data is not copied again.
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

class Workers {
 public:
  Workers(fuse_session *se, unsigned n) : se_(se) {
    SignalsBlocked blocked;
    for (unsigned i = 0; i < n; ++i) threads_.emplace_back([this] { Run(); });
  }
  ~Workers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread &t : threads_) t.join();
  }
  void Push(const fuse_buf &buf) {
    const char *mem = static_cast<const char *>(buf.mem);
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.emplace_back(mem, mem + buf.size);
    }
    cv_.notify_one();
  }

 private:
  void Run() {
    for (;;) {
      std::vector<char> request;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;  // what is queued fails with the unmount
        request = std::move(queue_.front());
        queue_.pop_front();
      }
      fuse_buf buf{};
      buf.mem = request.data();
      buf.size = request.size();
      fuse_session_process_buf(se_, &buf);
    }
  }

  fuse_session *se_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::vector<char>> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

SignalsBlocked::SignalsBlocked() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &saved_);
}

SignalsBlocked::~SignalsBlocked() {
  pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
}

int RunFuseLoop(fuse_session *se, unsigned workers) {
  Workers pool(se, workers);
  fuse_buf buf{};
  int rc = 0;
  while (!fuse_session_exited(se)) {
    rc = fuse_session_receive_buf(se, &buf);
    if (rc == -EINTR) continue;
    if (rc <= 0) break;  // 0: unmounted, or a signal ended the session
    const auto *in = static_cast<const fuse_in_header *>(buf.mem);
    if (ServedInline(in->opcode))
      fuse_session_process_buf(se, &buf);
    else
      pool.Push(buf);
  }
  free(buf.mem);
  return rc < 0 ? rc : 0;
}

}  // namespace maru
