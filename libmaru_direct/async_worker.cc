#include "async_worker.h"

namespace maru {

AsyncWorker::AsyncWorker() : thread_([this] { Run(); }) {}

AsyncWorker::~AsyncWorker() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.SignalAll();
  thread_.join();
}

void AsyncWorker::Submit(std::function<void()> job) {
  {
    MutexLock lock(&mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.Signal();
}

void AsyncWorker::Run() {
  for (;;) {
    std::function<void()> job;
    {
      MutexLock lock(&mu_);
      while (!stopping_ && jobs_.empty()) cv_.Wait(&mu_);
      if (jobs_.empty()) return;  // stopping, and nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace maru
