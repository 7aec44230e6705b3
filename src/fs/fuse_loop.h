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
// reads"). Reads and writes never wait on the server but for a writer's
// rare reservation; lookups, opens, seals and the rest do, so they go to
// the workers, as before, and a slow one holds up no read.
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>
#include <signal.h>

namespace maru {

// Runs until the session exits (unmount, signal); 0, or a negative errno.
// `workers` threads serve the requests handed on. Call on the thread the
// signal handlers should interrupt (fuse_set_signal_handlers): the workers
// block signals.
int RunFuseLoop(fuse_session *se, unsigned workers);

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
