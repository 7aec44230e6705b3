// One background thread that runs jobs in submission order: a maru_t's
// async batches (maru_read_into_batch_async, maru_write_from_batch_async).
#pragma once

#include <deque>
#include <functional>
#include <thread>

#include "util/mutex.h"

namespace maru {

class AsyncWorker {
 public:
  AsyncWorker();
  // Runs the jobs still queued, then stops.
  ~AsyncWorker();
  AsyncWorker(const AsyncWorker &) = delete;
  AsyncWorker &operator=(const AsyncWorker &) = delete;

  void Submit(std::function<void()> job) EXCLUDES(mu_);

 private:
  void Run() EXCLUDES(mu_);

  Mutex mu_;
  CondVar cv_;  // signalled when a job comes or the worker stops
  std::deque<std::function<void()>> jobs_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace maru
