// Scatter/gather copies between chunks and the caller's buffers, in one C
// call per batch: maru_read_into_batch / maru_write_from_batch and their
// async forms (maru_future_t).
#ifndef MARU_PY_BATCH_IO_H
#define MARU_PY_BATCH_IO_H

#include <pybind11/pybind11.h>

#include <memory>
#include <vector>

#include "buffer.h"
#include "chunk_handle.h"

namespace maru_py {

// The buffers and chunks of one batch, held until it is done: ops are
// (ChunkHandle, buffer, chunk offset) tuples; the length is the buffer's.
class BatchBuffers {
 public:
  BatchBuffers(const pybind11::list &ops, bool into_buffers);
  std::vector<maru_read_op_t> ReadOps() const;
  std::vector<maru_write_op_t> WriteOps() const;
  size_t size() const { return handles_.size(); }

 private:
  std::vector<ChunkHandle *> handles_;
  std::vector<pybind11::object> owners_;  // the ChunkHandle objects
  std::vector<std::unique_ptr<ContiguousBuffer>> buffers_;
  std::vector<uint64_t> offsets_;
};

// An async batch in flight: the maru_future_t, the results array it fills
// and the buffers it reads or writes.
class BatchFuture {
 public:
  BatchFuture(std::unique_ptr<BatchBuffers> buffers, bool read);
  ~BatchFuture();
  BatchFuture(const BatchFuture &) = delete;
  BatchFuture &operator=(const BatchFuture &) = delete;

  int fd() const { return maru_future_fd(f_); }
  // maru_future_wait() with the GIL released: 0, the first op's error, or
  // -ETIMEDOUT (still running).
  int Wait(int timeout_ms);
  // One result per op (0 or a negative errno); waits if still running.
  std::vector<int> Results();

 private:
  std::unique_ptr<BatchBuffers> buffers_;
  std::vector<int> results_;
  maru_future_t *f_ = nullptr;
};

// 0 or a negative errno per op; the GIL is released around the copy.
std::vector<int> ReadIntoBatch(const pybind11::list &ops);
std::vector<int> WriteFromBatch(const pybind11::list &ops);

void RegisterBatchIo(pybind11::module_ &m);

}  // namespace maru_py

#endif  // MARU_PY_BATCH_IO_H
