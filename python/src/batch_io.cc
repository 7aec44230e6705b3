#include "batch_io.h"

#include <pybind11/stl.h>

#include "errors.h"

namespace py = pybind11;

namespace maru_py {

BatchBuffers::BatchBuffers(const py::list &ops, bool into_buffers) {
  if (ops.size() > MARU_BATCH_MAX) ThrowErrno(-E2BIG);
  for (py::handle item : ops) {
    py::tuple op = py::reinterpret_borrow<py::object>(item).cast<py::tuple>();
    if (op.size() != 3) throw py::value_error("maru: an op is (chunk, buffer, chunk_offset)");
    ChunkHandle *handle = op[0].cast<ChunkHandle *>();
    handle->connection()->CheckFork();
    if (handle->empty()) throw py::value_error("maru: a chunk of the batch holds nothing");
    handles_.push_back(handle);
    owners_.push_back(py::reinterpret_borrow<py::object>(op[0]));
    buffers_.push_back(std::make_unique<ContiguousBuffer>(op[1], into_buffers));
    offsets_.push_back(op[2].cast<uint64_t>());
  }
}

std::vector<maru_read_op_t> BatchBuffers::ReadOps() const {
  std::vector<maru_read_op_t> ops;
  for (size_t i = 0; i < handles_.size(); i++)
    ops.push_back({handles_[i]->handle(), buffers_[i]->data(), offsets_[i], buffers_[i]->size()});
  return ops;
}

std::vector<maru_write_op_t> BatchBuffers::WriteOps() const {
  std::vector<maru_write_op_t> ops;
  for (size_t i = 0; i < handles_.size(); i++)
    ops.push_back({handles_[i]->handle(), buffers_[i]->data(), offsets_[i], buffers_[i]->size()});
  return ops;
}

namespace {

// The whole batch in one call; only if it fails, each op alone to tell
// which failed and why (the async forms report per op the same way).
template <typename Op>
std::vector<int> RunSync(const std::vector<Op> &ops, int (*batch)(const Op *, size_t)) {
  std::vector<int> results(ops.size(), 0);
  py::gil_scoped_release nogil;
  if (batch(ops.data(), ops.size()) < 0)
    for (size_t i = 0; i < ops.size(); i++) results[i] = batch(&ops[i], 1);
  return results;
}

}  // namespace

std::vector<int> ReadIntoBatch(const py::list &ops) {
  BatchBuffers buffers(ops, /*into_buffers=*/true);
  return RunSync(buffers.ReadOps(), &maru_read_into_batch);
}

std::vector<int> WriteFromBatch(const py::list &ops) {
  BatchBuffers buffers(ops, /*into_buffers=*/false);
  return RunSync(buffers.WriteOps(), &maru_write_from_batch);
}

BatchFuture::BatchFuture(std::unique_ptr<BatchBuffers> buffers, bool read)
    : buffers_(std::move(buffers)), results_(buffers_->size(), 0) {
  int rc;
  if (read) {
    std::vector<maru_read_op_t> ops = buffers_->ReadOps();
    rc = maru_read_into_batch_async(ops.data(), ops.size(), results_.data(), &f_);
  } else {
    std::vector<maru_write_op_t> ops = buffers_->WriteOps();
    rc = maru_write_from_batch_async(ops.data(), ops.size(), results_.data(), &f_);
  }
  Check(rc);
}

BatchFuture::~BatchFuture() {
  if (f_) {
    py::gil_scoped_release nogil;
    maru_future_free(f_);  // waits for the copies before the buffers go
  }
}

int BatchFuture::Wait(int timeout_ms) {
  py::gil_scoped_release nogil;
  return maru_future_wait(f_, timeout_ms);
}

std::vector<int> BatchFuture::Results() {
  Wait(-1);
  return results_;
}

void RegisterBatchIo(py::module_ &m) {
  py::class_<BatchFuture>(m, "BatchFuture",
                          "An async batch (maru_future_t); holds its buffers until freed.")
      .def(py::init([](const py::list &ops, bool read) {
             return std::make_unique<BatchFuture>(std::make_unique<BatchBuffers>(ops, read), read);
           }),
           py::arg("ops"), py::arg("read"))
      .def("fd", &BatchFuture::fd, "maru_future_fd(): an eventfd, readable once done.")
      .def("wait", &BatchFuture::Wait, py::arg("timeout_ms") = -1,
           "maru_future_wait(): 0, the first op's error, or -ETIMEDOUT.")
      .def("results", &BatchFuture::Results, "0 or a negative errno per op (waits).");
  m.def("read_into_batch", &ReadIntoBatch, py::arg("ops"),
        "maru_read_into_batch() of (ChunkHandle, buffer, offset) ops: 0 or -errno per op.");
  m.def("write_from_batch", &WriteFromBatch, py::arg("ops"),
        "maru_write_from_batch() of (ChunkHandle, buffer, offset) ops: 0 or -errno per op.");
}

}  // namespace maru_py
