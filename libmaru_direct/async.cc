// Asynchronous batches: maru_read_into_batch_async() and
// maru_write_from_batch_async() run the synchronous batch on the maru_t's
// worker thread and report through a future: a condition for
// maru_future_wait() and an eventfd for poll loops.
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <new>
#include <vector>

#include "handles.h"
#include "read_and_write.h"
#include "util/mutex.h"

struct maru_future {
  int efd = -1;  // set before the future is shared, then only read
  maru::Mutex mu;
  maru::CondVar cv;  // signalled once, when the batch is done
  bool done GUARDED_BY(mu) = false;
  int result GUARDED_BY(mu) = 0;
};

namespace {

// The maru_t all ops name (nullptr and -EINVAL if they differ or none).
template <typename Op>
int BatchOwner(const Op *ops, size_t n, maru_t **m) {
  *m = nullptr;
  if (!ops && n) return -EINVAL;
  if (n > MARU_BATCH_MAX) return -E2BIG;
  for (size_t i = 0; i < n; ++i) {
    if (!ops[i].chunk) return -EINVAL;
    if (*m && *m != ops[i].chunk->m) return -EINVAL;
    *m = ops[i].chunk->m;
  }
  return 0;
}

maru::AsyncWorker *Worker(maru_t *m) {
  maru::MutexLock lock(&m->worker_mu);
  if (!m->worker) m->worker = std::make_unique<maru::AsyncWorker>();
  return m->worker.get();
}

// All under the lock: maru_future_free() returns from its wait (which takes
// the lock) and then closes the eventfd and deletes the future, so a
// notify or write after unlocking could touch a freed condition variable
// or a closed descriptor whose number the caller may already have reused
// (ThreadSanitizer found both).
void Finish(maru_future_t *f, int result) {
  maru::MutexLock lock(&f->mu);
  f->result = result;
  f->done = true;
  f->cv.SignalAll();
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t w = write(f->efd, &one, sizeof(one));
}

// One op's check, then the valid ops in one synchronous batch: each op's
// result is its check's error or the batch's.
template <typename Op>
int RunBatch(const std::vector<Op> &ops, int *results, int (*check)(const Op &),
             int (*batch)(const Op *, size_t)) {
  std::vector<Op> valid;
  std::vector<size_t> where;
  std::vector<int> mine(ops.size(), 0);
  for (size_t i = 0; i < ops.size(); ++i) {
    mine[i] = check(ops[i]);
    if (mine[i] == 0) {
      valid.push_back(ops[i]);
      where.push_back(i);
    }
  }
  const int rc = valid.empty() ? 0 : batch(valid.data(), valid.size());
  for (size_t i : where) mine[i] = rc;
  int first = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (results) results[i] = mine[i];
    if (!first) first = mine[i];
  }
  return first;
}

template <typename Op>
int Submit(const Op *ops, size_t n, int *results, maru_future_t **out, int (*check)(const Op &),
           int (*batch)(const Op *, size_t)) {
  if (out) *out = nullptr;
  if (!out) return -EINVAL;
  maru_t *m = nullptr;
  if (int rc = BatchOwner(ops, n, &m); rc < 0) return rc;
  auto f = std::unique_ptr<maru_future_t>(new (std::nothrow) maru_future_t());
  if (!f) return -ENOMEM;
  f->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (f->efd < 0) return -errno;
  maru_future_t *raw = f.get();
  if (n == 0) {
    Finish(raw, 0);
  } else {
    try {
      Worker(m)->Submit([raw, copy = std::vector<Op>(ops, ops + n), results, check, batch] {
        Finish(raw, RunBatch(copy, results, check, batch));
      });
    } catch (const std::exception &) {  // no thread, no memory
      close(raw->efd);
      return -EAGAIN;
    }
  }
  *out = f.release();
  return 0;
}

}  // namespace

extern "C" {

int maru_read_into_batch_async(const maru_read_op_t *ops, size_t n, int *results,
                               maru_future_t **out) {
  return Submit<maru_read_op_t>(ops, n, results, out, maru::direct::CheckReadOp,
                                maru_read_into_batch);
}

int maru_write_from_batch_async(const maru_write_op_t *ops, size_t n, int *results,
                                maru_future_t **out) {
  return Submit<maru_write_op_t>(ops, n, results, out, maru::direct::CheckWriteOp,
                                 maru_write_from_batch);
}

int maru_future_wait(maru_future_t *f, int timeout_ms) {
  if (!f) return -EINVAL;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  maru::MutexLock lock(&f->mu);
  while (!f->done) {
    if (timeout_ms < 0)
      f->cv.Wait(&f->mu);
    else if (!f->cv.WaitUntil(&f->mu, deadline) && !f->done)
      return -ETIMEDOUT;
  }
  return f->result;
}

int maru_future_fd(maru_future_t *f) {
  return f ? f->efd : -EINVAL;
}

void maru_future_free(maru_future_t *f) {
  if (!f) return;
  maru_future_wait(f, -1);
  close(f->efd);
  delete f;
}

}  // extern "C"
