#include "chunk_handle.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>

#include "buffer.h"
#include "errors.h"

namespace py = pybind11;

namespace maru_py {

ChunkHandle::ChunkHandle(std::shared_ptr<SharedConnection> conn, maru_chunk_t *c, bool writable)
    : conn_(std::move(conn)), c_(c), writable_(writable) {
  Refresh();
}

ChunkHandle::~ChunkHandle() {
  // Runs when the last view is gone. A forked child leaves the handle (and
  // the connection) to the parent; the library must not be called there.
  if (conn_->Forked()) return;
  const bool gil = PyGILState_Check();
  // In a batch (whose kept handles the GIL guards), it goes at its end.
  if (gil && ReleaseBatch::Keep(c_, conn_)) return;
  auto release = [this] {
    maru_release(c_);
    conn_.reset();  // may be the last reference: maru_disconnect()
  };
  if (gil) {
    py::gil_scoped_release nogil;
    release();
  } else {
    release();
  }
}

void ChunkHandle::Refresh() {
  data_ = maru_chunk_data(c_);
  size_ = maru_chunk_size(c_);
}

void ChunkHandle::CheckUsable() const {
  conn_->CheckFork();
  if (empty_)
    throw py::value_error(
        "maru: this chunk holds nothing (its allocation was lost with its session); release it");
}

void ChunkHandle::Seal() {
  CheckUsable();
  int rc;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    rc = maru_seal(c_);
    if (rc == 0) MarkSealed();
  }
  Check(rc);
}

void ChunkHandle::MarkSealed() {
  writable_ = false;
  Refresh();
}

void ChunkHandle::Publish(const std::string &path, const std::optional<std::string> &parent) {
  CheckUsable();
  const char *cpath = CPath(path), *cparent = parent ? CPath(*parent) : nullptr;
  int rc;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    rc = maru_publish(c_, cpath, cparent);
    if (rc == 0) MarkSealed();
    // The allocation was lost with its session: nothing is held any more.
    // (A name taken, EEXIST, leaves the allocation held and writable.)
    if (rc == -ESTALE) {
      empty_ = true;
      writable_ = false;
    }
  }
  Check(rc, &path);
}

void ChunkHandle::Write(py::object src, uint64_t offset) {
  CheckUsable();
  if (!writable_) throw py::value_error("maru: the chunk is sealed (chunks are immutable)");
  ContiguousBuffer in(src, /*writable=*/false);
  if (offset > size_ || in.size() > size_ - offset)
    throw py::value_error("maru: write past the end of the chunk");
  int rc;
  {
    // The library's copy: large ones stream past the caches into the pool.
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    rc = maru_write_from(c_, in.data(), offset, in.size());
  }
  Check(rc);
}

void ChunkHandle::ReadInto(py::object dst, uint64_t offset) {
  CheckUsable();
  ContiguousBuffer out(dst, /*writable=*/true);
  int rc;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    rc = maru_read_into(c_, out.data(), offset, out.size());
  }
  Check(rc);
}

void ChunkHandle::PublishPart(uint32_t upto) {
  CheckUsable();
  int rc;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    rc = maru_publish_part(c_, upto);
  }
  Check(rc);
}

void ChunkHandle::WaitPart(uint32_t part, int timeout_ms) {
  CheckUsable();
  int rc;
  {
    py::gil_scoped_release nogil;
    // Not under mu_: a wait may be long, and reads of parts already
    // published must not queue behind it (the handle's part count is
    // atomic in the library).
    rc = maru_wait_part(c_, part, timeout_ms);
  }
  Check(rc);
}

bool ChunkHandle::Verify() {
  CheckUsable();
  int rc;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    rc = maru_verify(c_);
  }
  if (rc == -EBADMSG) return false;
  Check(rc);
  return true;
}

void ChunkHandle::LeaseCheck() {
  CheckUsable();
  int rc;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    rc = maru_lease_check(c_);
  }
  Check(rc);
}

void ChunkHandle::PrepareBuffer() {
  CheckUsable();
  if (data_ || size_ == 0) return;
  // A chunk behind maru-agent whose fetch failed: ask why.
  char byte;
  int rc;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);
    rc = maru_read_into(c_, &byte, 0, 1);
    if (rc == 0) Refresh();
  }
  Check(rc < 0 ? rc : (data_ ? 0 : -EIO));
}

namespace {

py::handle fork_error_type;

// bf_getbuffer of ChunkHandle. pybind11's own (def_buffer) cannot report an
// error, and every export must be able to: a forked child, a chunk that
// holds nothing. The buffer's `obj` is the ChunkHandle, so each view keeps it
// (and the handle) alive.
extern "C" int ChunkHandleGetBuffer(PyObject *obj, Py_buffer *view, int flags) {
  view->obj = nullptr;
  try {
    ChunkHandle &handle = py::cast<ChunkHandle &>(py::handle(obj));
    handle.PrepareBuffer();
    return PyBuffer_FillInfo(view, obj, handle.data(), static_cast<Py_ssize_t>(handle.size()),
                             handle.writable() ? 0 : 1, flags);
  } catch (py::error_already_set &e) {
    e.restore();
  } catch (py::builtin_exception &e) {
    e.set_error();
  } catch (ForkError &e) {
    PyErr_SetString(fork_error_type.ptr(), e.what());
  } catch (std::exception &e) {
    PyErr_SetString(PyExc_BufferError, e.what());
  }
  return -1;
}

}  // namespace

std::vector<int> SealBatch(const std::vector<ChunkHandle *> &handles) {
  for (ChunkHandle *l : handles) {
    l->connection()->CheckFork();
    if (l->connection() != handles.front()->connection())
      throw py::value_error("maru: seal_batch takes chunks of one connection");
    if (l->empty()) throw py::value_error("maru: a chunk of the batch holds nothing");
  }
  std::vector<maru_chunk_t *> chunks;
  for (ChunkHandle *l : handles) chunks.push_back(l->handle());
  std::vector<int> results(handles.size(), 0);
  int rc = 0;
  {
    py::gil_scoped_release nogil;
    // Lock in address order so that two overlapping batches cannot deadlock.
    std::vector<ChunkHandle *> order(handles);
    std::sort(order.begin(), order.end());
    order.erase(std::unique(order.begin(), order.end()), order.end());
    std::vector<std::unique_lock<std::mutex>> locks;
    for (ChunkHandle *l : order) locks.emplace_back(l->mutex());
    rc = maru_seal_batch(chunks.data(), chunks.size(), results.data());
    if (rc == 0)
      for (size_t i = 0; i < handles.size(); i++)
        if (results[i] == 0) handles[i]->MarkSealed();
  }
  Check(rc);
  return results;
}

struct KeptHandles {
  int entered = 0;  // batches entered on the thread and not exited
  std::vector<maru_chunk_t *> handles;
  std::vector<std::shared_ptr<SharedConnection>> conns;  // keep the pool mapped until then
};

namespace {

// This thread's, shared with the batches entered on it: one may exit on
// another thread, or after this one ended.
std::shared_ptr<KeptHandles> &ThreadKept() {
  thread_local std::shared_ptr<KeptHandles> kept;
  return kept;
}

}  // namespace

void ReleaseBatch::Enter() {
  if (kept_) throw py::value_error("maru: this ReleaseBatch is entered already");
  std::shared_ptr<KeptHandles> &mine = ThreadKept();
  if (!mine) mine = std::make_shared<KeptHandles>();
  kept_ = mine;
  ++kept_->entered;
}

void ReleaseBatch::Exit() {
  if (!kept_) return;
  const std::shared_ptr<KeptHandles> kept = std::move(kept_);
  kept_.reset();
  if (--kept->entered > 0 || kept->handles.empty()) return;
  std::vector<maru_chunk_t *> handles;
  std::vector<std::shared_ptr<SharedConnection>> conns;
  handles.swap(kept->handles);
  conns.swap(kept->conns);
  // A child forked inside the block leaves the parent's handles alone.
  size_t n = 0;
  for (size_t i = 0; i < handles.size(); ++i)
    if (!conns[i]->Forked()) handles[n++] = handles[i];
  py::gil_scoped_release nogil;
  maru_release_batch(handles.data(), n, nullptr);
  conns.clear();  // may be the last references: maru_disconnect()
}

bool ReleaseBatch::Keep(maru_chunk_t *c, std::shared_ptr<SharedConnection> &conn) noexcept {
  KeptHandles *kept = ThreadKept().get();
  if (!kept || kept->entered == 0) return false;
  try {
    // Grown ahead, as push_back would, so that the push_backs cannot throw.
    if (kept->handles.size() == kept->handles.capacity())
      kept->handles.reserve(std::max<size_t>(64, 2 * kept->handles.capacity()));
    if (kept->conns.size() == kept->conns.capacity())
      kept->conns.reserve(std::max<size_t>(64, 2 * kept->conns.capacity()));
  } catch (const std::bad_alloc &) {
    return false;  // the ChunkHandle releases its handle itself
  }
  kept->handles.push_back(c);
  kept->conns.push_back(std::move(conn));
  return true;
}

void RegisterChunkHandle(py::module_ &m) {
  fork_error_type = m.attr("ForkError");
  py::class_<ChunkHandle> cls(
      m, "ChunkHandle", py::buffer_protocol(),
      "A chunk handle and its lease; exports the chunk's bytes as a buffer.\n\n"
      "The handle is released when this object dies, i.e. after the last\n"
      "memoryview, numpy array or torch tensor over it.");
  auto *heap = reinterpret_cast<PyHeapTypeObject *>(cls.ptr());
  heap->as_buffer.bf_getbuffer = ChunkHandleGetBuffer;
  heap->as_buffer.bf_releasebuffer = nullptr;
  cls.def_property_readonly("size", &ChunkHandle::size, "Bytes in the chunk.")
      .def_property_readonly("data_ptr", &ChunkHandle::data_ptr,
                             "Address of the chunk's bytes in this process.")
      .def_property_readonly("writable", &ChunkHandle::writable, "True until sealed or published.")
      .def_property_readonly("empty", &ChunkHandle::empty,
                             "True after a publish found the allocation lost with its session.")
      .def("seal", &ChunkHandle::Seal, "maru_seal(): publish a chunk from create().")
      .def("publish", &ChunkHandle::Publish, py::arg("path"), py::arg("parent") = py::none(),
           "maru_publish(): name a chunk from alloc() and seal it.")
      .def("write", &ChunkHandle::Write, py::arg("src"), py::arg("offset") = 0,
           "Copy a buffer into a writable chunk at offset (GIL released).")
      .def("read_into", &ChunkHandle::ReadInto, py::arg("dst"), py::arg("offset") = 0,
           "maru_read_into(): copy len(dst) bytes from offset into dst.")
      .def_property_readonly("parts", &ChunkHandle::parts, "maru_chunk_parts().")
      .def("publish_part", &ChunkHandle::PublishPart, py::arg("upto"),
           "maru_publish_part(): parts [0, upto] are final.")
      .def("wait_part", &ChunkHandle::WaitPart, py::arg("part"), py::arg("timeout_ms") = -1,
           "maru_wait_part(): returns once the part is published (GIL released).")
      .def("verify", &ChunkHandle::Verify, "maru_verify(): False if the checksum does not match.")
      .def("lease_check", &ChunkHandle::LeaseCheck,
           "maru_lease_check(): OSError(ESTALE) if the lease may have lapsed since the open.");
  m.def(
      "seal_batch",
      [](const std::vector<ChunkHandle *> &handles) {
        if (handles.empty()) return std::vector<int>();
        return SealBatch(handles);
      },
      py::arg("handles"), "maru_seal_batch(): 0 or a negative errno per chunk.");
  py::class_<ReleaseBatch>(m, "ReleaseBatch",
                           "with ReleaseBatch(): the chunk handles that die in the block\n"
                           "(on this thread) go in one maru_release_batch() at its end.")
      .def(py::init<>())
      .def("__enter__", &ReleaseBatch::Enter)
      .def("__exit__", [](ReleaseBatch &b, const py::args &) { b.Exit(); });
}

}  // namespace maru_py
