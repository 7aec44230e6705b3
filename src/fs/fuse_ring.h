// FuseRing: FUSE requests served over io_uring (kernel 6.14+), one queue
// per CPU, beside /dev/fuse.
//
// Why: a 4 KiB read through /dev/fuse is a round trip between the reader
// and a daemon thread that the scheduler puts on another CPU; on a VM each
// of its two wake-ups is an inter-processor interrupt, and those, not the
// daemon's work, cost most of the time (docs/benchmarks.md, "The mount:
// 4 KiB reads"). Over the ring the kernel hands a request to the queue of
// the CPU it was made on, whose threads are pinned there: the reader and
// the daemon take turns on one CPU, and the reply and the fetch of the next
// request are one system call.
//
// libfuse 3.14 knows nothing of the ring, so each request is rebuilt as
// /dev/fuse would have delivered it (header, per-op header, payload, in one
// buffer) and given to fuse_session_process_buf: the file system's handlers
// are the same. Their reply reaches the ring through the session's custom
// writev (it copies the reply into the entry's payload buffer, one copy the
// kernel then copies on: reads cost a copy more than over /dev/fuse).
// Handlers must reply before they return, as all of MaruFs's do.
// Notifications, FORGETs and interrupts still go through /dev/fuse, whose
// loop keeps running.
//
// A queue's thread serves reads and writes itself, as the /dev/fuse loop
// does, and hands whatever may wait on the server to the workers
// (fuse_loop.h), entry and all. An entry handed on is the kernel's no more
// until its reply is committed, so the thread then registers another, if
// the kernel has none left of it: the CPU's next read finds one instead of
// waiting behind a lookup or a hung server call. A thread holds at most
// kMaxEntries; past that, its CPU's requests wait for the workers.
//
// The kernel offers the ring only where root set fuse.enable_uring=1
// (/sys/module/fuse/parameters/enable_uring) before the mount; otherwise
// and in builds without liburing, nothing here is used.
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "util/status.h"

namespace maru {

class CpuWakeLatency;
class FuseWorkers;

// FUSE_OVER_IO_URING of <linux/fuse.h> 7.42, absent from older headers.
constexpr uint64_t kFuseOverIoUring = 1ull << 41;

// Whether this build can serve the ring (it was built with liburing).
bool FuseRingBuilt();

class FuseRing {
 public:
  // Serves `se` over the ring: call once the INIT reply granted
  // kFuseOverIoUring, before the /dev/fuse loop starts. `per_queue`
  // threads serve each CPU's queue (more than one, so that a request whose
  // handling waits on another request of the same CPU, as a writeback does,
  // is served), handing on to `workers`, and telling `wake` of each
  // request; both must outlive the threads.
  static Result<std::unique_ptr<FuseRing>> Start(fuse_session *se, unsigned per_queue,
                                                 FuseWorkers *workers, CpuWakeLatency *wake);
  // Stops and joins the threads; requests the ring still holds fail. The
  // workers are then to be stopped before the ring is destroyed: they may
  // still be serving its entries.
  void Stop();
  ~FuseRing();

  // Whether the calling thread serves a request of the ring, whose reply
  // must go through the session's writev (not be spliced to /dev/fuse).
  static bool Serving();
  FuseRing(const FuseRing &) = delete;
  FuseRing &operator=(const FuseRing &) = delete;

  struct Queue;  // one thread's ring (fuse_ring.cc)
  struct Entry;  // one registered entry: a request's buffers

 private:
  FuseRing() = default;
  std::vector<std::unique_ptr<Queue>> queues_;
};

}  // namespace maru
