// CpuWakeLatency: while a daemon serves requests, asks the kernel to keep
// idle CPUs able to wake at once (a PM QoS CPU latency request of 0 µs,
// /dev/cpu_dma_latency), and drops the request once requests stop. Used by
// maru-fuse (each FUSE request) and maru-server (each fast-lane request).
//
// Why: a request is two wake-ups, the server's and the caller's, and the
// scheduler likes to wake the caller on the CPU the server left idle.
// Where an idle CPU halts (a VM's halt is an exit to the hypervisor; a
// bare-metal CPU in a deep C-state takes tens of µs to leave it), those
// wake-ups, not the work, set the pace of small requests: 4 KiB reads
// through the mount ran 3-4x faster with the request held, and a create or
// seal that follows a 32 MiB copy costs ~50 µs instead of ~150 µs
// (docs/benchmarks.md, "The mount: idle CPUs poll while requests come" and
// "The data path at the copy limit"). With it held, idle CPUs poll, which
// costs power (on a VM, host CPU time): so only while requests come, and
// never longer than a set time (kRelease by default) after the last.
//
// Only root may hold such a request; elsewhere, and when disabled,
// nothing is held and NoteRequest costs a load.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

#include "util/mutex.h"

namespace maru {

class CpuWakeLatency {
 public:
  // How long the request is held after the last request, at most, unless
  // the owner says otherwise.
  static constexpr std::chrono::milliseconds kRelease{50};

  // Holds nothing, ever, unless `enabled`; holds it for at most `release`
  // after the last request.
  explicit CpuWakeLatency(bool enabled, std::chrono::milliseconds release = kRelease);
  ~CpuWakeLatency();
  CpuWakeLatency(const CpuWakeLatency &) = delete;
  CpuWakeLatency &operator=(const CpuWakeLatency &) = delete;

  // Called for each request, by any thread: holds the request if it is not
  // held. Costs two loads while it is.
  void NoteRequest() {
    if (!busy_.load(std::memory_order_relaxed)) busy_.store(true, std::memory_order_relaxed);
    if (!held_.load(std::memory_order_relaxed)) Want();
  }

 private:
  void Want() EXCLUDES(mu_);
  void Run() EXCLUDES(mu_);

  const std::chrono::milliseconds release_;
  std::atomic<bool> busy_{false};  // a request came since the thread last looked
  std::atomic<bool> held_{true};   // also while it cannot be held: then nobody wants it
  Mutex mu_;
  CondVar cv_;
  bool wanted_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace maru
