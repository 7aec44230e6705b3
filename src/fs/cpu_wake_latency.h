// CpuWakeLatency: while a mount serves requests, asks the kernel to keep
// idle CPUs able to wake at once (a PM QoS CPU latency request of 0 µs,
// /dev/cpu_dma_latency), and drops the request once requests stop.
//
// Why: a FUSE request is two wake-ups, the daemon's and the caller's, and
// the scheduler likes to wake the caller on the CPU the daemon left idle.
// Where an idle CPU halts (a VM's halt is an exit to the hypervisor; a
// bare-metal CPU in a deep C-state takes tens of µs to leave it), those
// wake-ups, not the daemon's work, set the pace of small requests: 4 KiB
// reads ran 3-4x faster with the request held (docs/benchmarks.md, "The
// mount: idle CPUs poll while requests come"). With it held, idle CPUs
// poll, which costs power (on a VM, host CPU time): so only while requests
// come, and never longer than kRelease after the last.
//
// Only root may hold such a request; elsewhere, and with -o idle_poll=0,
// nothing is held and NoteRequest costs a load.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace maru {

class CpuWakeLatency {
 public:
  // How long the request is held after the last request, at most.
  static constexpr std::chrono::milliseconds kRelease{50};

  // Holds nothing, ever, unless `enabled`.
  explicit CpuWakeLatency(bool enabled);
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
  void Want();
  void Run();

  std::atomic<bool> busy_{false};  // a request came since the thread last looked
  std::atomic<bool> held_{true};   // also while it cannot be held: then nobody wants it
  std::mutex mu_;
  std::condition_variable cv_;
  bool wanted_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace maru
