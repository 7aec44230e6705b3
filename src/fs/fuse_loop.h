// FuseLoop: serves /dev/fuse with one reading thread that serves reads and
// writes itself, and hands every other request to a pool of workers.
//
// Why not libfuse's multi-threaded loop: it lets every idle thread wait on
// /dev/fuse, and the kernel wakes them in turn, so one reader's successive
// requests land on different threads. The scheduler then sees a process
// waking many tasks and spreads them over the CPUs: each request and each
// reply crosses CPUs, two wake-ups that on a VM cost an inter-processor
// interrupt each. One thread that the reader always wakes is kept next to it
// (4 KiB reads ran 2-5x faster: docs/benchmarks.md, "The mount: 4 KiB
// reads"). Lookups, opens, seals and the rest wait on the server, so they go
// to the workers, as before. Reads and writes mostly do not; the one that
// would (a write that grows its reservation, a read of a file whose writer
// is in such a write) is handed on too (HandToWorker): the loop's thread
// serves every file's reads, and a slow or hung server call there would
// hold them all up.
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>
#include <signal.h>

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "util/mutex.h"

namespace maru {

class CpuWakeLatency;

// The requests a loop serves on its own thread (reads, writes, and what
// libfuse answers without the file system); every other one may wait on
// the server.
bool ServedInline(uint32_t opcode);

// Whether the calling thread serves requests of many files in turn (the
// /dev/fuse loop's, a ring queue's) and so must not wait: on the server, or
// on a lock held across a call to it. Handlers that would have to call
// HandToWorker.
bool MustNotWait();
// Called by a handler on a thread that MustNotWait() instead of serving
// `req`: the request is served anew on a worker, from the same bytes. The
// handler must not have replied, and must not touch `req` after this.
void HandToWorker(fuse_req_t req);
// Processes `buf` as a thread that must not wait: false if its handler
// handed it on, and it is to be served again, on a worker, from `buf`.
bool ProcessWithoutWaiting(fuse_session *se, const fuse_buf &buf);

// The threads that serve what the loops hand on. Jobs still queued when it
// is destroyed are dropped: their requests fail with the unmount.
class FuseWorkers {
 public:
  FuseWorkers(fuse_session *se, unsigned n);
  ~FuseWorkers();
  FuseWorkers(const FuseWorkers &) = delete;
  FuseWorkers &operator=(const FuseWorkers &) = delete;

  // Serves a copy of the /dev/fuse request in `buf`.
  void Push(const fuse_buf &buf) EXCLUDES(mu_);
  // Runs `job` on a worker.
  void Push(std::function<void()> job) EXCLUDES(mu_);

 private:
  void Run() EXCLUDES(mu_);

  fuse_session *se_;
  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> queue_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

// Runs until the session exits (unmount, signal); 0, or a negative errno.
// Tells `wake` of each request. Call on the thread the signal handlers
// should interrupt (fuse_set_signal_handlers): the workers block signals.
int RunFuseLoop(fuse_session *se, FuseWorkers *workers, CpuWakeLatency *wake);

// Blocks the signals a session handles in threads created while it lives,
// so that they reach the loop's thread and end its wait on /dev/fuse.
class SignalsBlocked {
 public:
  SignalsBlocked();
  ~SignalsBlocked();
  SignalsBlocked(const SignalsBlocked &) = delete;
  SignalsBlocked &operator=(const SignalsBlocked &) = delete;

 private:
  sigset_t saved_;
};

}  // namespace maru
