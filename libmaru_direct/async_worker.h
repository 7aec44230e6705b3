// One background thread that runs jobs in submission order: a maru_t's
// async batches (maru_read_into_batch_async, maru_write_from_batch_async).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace maru {

class AsyncWorker {
 public:
  AsyncWorker();
  // Runs the jobs still queued, then stops.
  ~AsyncWorker();
  AsyncWorker(const AsyncWorker &) = delete;
  AsyncWorker &operator=(const AsyncWorker &) = delete;

  void Submit(std::function<void()> job);

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace maru
