#include "util/cpu_wake_latency.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "util/log.h"

namespace maru {
namespace {

constexpr char kQosDevice[] = "/dev/cpu_dma_latency";

// The request lives as long as the descriptor: closing it (or dying)
// drops it. -1 if it cannot be made.
int HoldZeroLatency() {
  const int fd = open(kQosDevice, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const int32_t zero_us = 0;
  if (write(fd, &zero_us, sizeof(zero_us)) != sizeof(zero_us)) {
    const int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

}  // namespace

CpuWakeLatency::CpuWakeLatency(bool enabled, std::chrono::milliseconds release)
    : release_(release) {
  if (!enabled) return;
  // Tried once here, so that a daemon that may not hold it says so at start.
  const int fd = HoldZeroLatency();
  if (fd < 0) {
    LOG_INFO("idle CPUs will not poll while requests come: %s: %s", kQosDevice, strerror(errno));
    return;
  }
  close(fd);
  held_.store(false);
  thread_ = std::thread([this] { Run(); });
}

CpuWakeLatency::~CpuWakeLatency() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.Signal();
  if (thread_.joinable()) thread_.join();
}

void CpuWakeLatency::Want() {
  {
    MutexLock lock(&mu_);
    wanted_ = true;
  }
  cv_.Signal();
}

void CpuWakeLatency::Run() {
  MutexLock lock(&mu_);
  for (;;) {
    while (!stop_ && !wanted_) cv_.Wait(&mu_);
    if (stop_) return;
    const int fd = HoldZeroLatency();
    if (fd < 0) {
      LOG_WARN("idle CPUs no longer poll while requests come: %s: %s", kQosDevice, strerror(errno));
      held_.store(true, std::memory_order_relaxed);  // so that nobody wants it
      return;
    }
    held_.store(true, std::memory_order_relaxed);
    // Held for as long as each half of release_ saw a request.
    busy_.store(true, std::memory_order_relaxed);
    while (!stop_ && busy_.exchange(false, std::memory_order_relaxed)) {
      const auto deadline = std::chrono::steady_clock::now() + release_ / 2;
      while (!stop_ && cv_.WaitUntil(&mu_, deadline)) {
      }
    }
    close(fd);
    held_.store(false, std::memory_order_relaxed);
    wanted_ = false;
  }
}

}  // namespace maru
