#include "prefix.h"

#include <pybind11/stl.h>

#include <cstring>
#include <utility>

#include "buffer.h"
#include "errors.h"

namespace py = pybind11;

namespace maru_py {

PrefixHandles::~PrefixHandles() {
  // The last Prefix and view are gone: what is still held goes now.
  if (!conn || conn->Forked()) return;
  std::vector<maru_chunk_t *> left;
  for (maru_chunk_t *c : chunks)
    if (c) left.push_back(c);
  if (left.empty()) return;
  if (PyGILState_Check()) {
    py::gil_scoped_release nogil;
    maru_release_batch(left.data(), left.size(), nullptr);
  } else {
    maru_release_batch(left.data(), left.size(), nullptr);
  }
}

void PrefixHandles::Settle(size_t i) {
  if (!released || views[i] > 0 || !chunks[i] || conn->Forked()) return;
  std::unique_lock<std::mutex> lock(mu);
  maru_chunk_t *c = std::exchange(chunks[i], nullptr);
  py::gil_scoped_release nogil;
  maru_release(c);
  lock.unlock();  // before the GIL is taken again
}

namespace {

// The exporter of one chunk's bytes for a memoryview: it holds the chunk
// (counted in PrefixHandles::views) until the view, and every view made
// from it, is gone.
class PrefixView {
 public:
  PrefixView(std::shared_ptr<PrefixHandles> h, size_t i) : h_(std::move(h)), i_(i) {
    ++h_->views[i_];
  }
  ~PrefixView() {
    --h_->views[i_];
    h_->Settle(i_);
  }
  PrefixView(const PrefixView &) = delete;
  PrefixView &operator=(const PrefixView &) = delete;
  maru_chunk_t *chunk() const { return h_->chunks[i_]; }

 private:
  std::shared_ptr<PrefixHandles> h_;
  size_t i_;
};

extern "C" int PrefixViewGetBuffer(PyObject *obj, Py_buffer *view, int flags) {
  view->obj = nullptr;
  try {
    PrefixView &v = py::cast<PrefixView &>(py::handle(obj));
    void *data = maru_chunk_data(v.chunk());
    const uint64_t size = maru_chunk_size(v.chunk());
    if (!data && size) {
      // A chunk behind maru-agent whose fetch failed: ask why.
      char byte;
      Check(maru_read_into(v.chunk(), &byte, 0, 1));
      Check(-EIO);
    }
    return PyBuffer_FillInfo(view, obj, data, static_cast<Py_ssize_t>(size), 1, flags);
  } catch (py::error_already_set &e) {
    e.restore();
  } catch (py::builtin_exception &e) {
    e.set_error();
  } catch (std::exception &e) {
    PyErr_SetString(PyExc_BufferError, e.what());
  }
  return -1;
}

// Index i of a Prefix of n chunks, Python style; IndexError past it.
size_t Index(Py_ssize_t i, size_t n) {
  const Py_ssize_t size = static_cast<Py_ssize_t>(n);
  if (i < 0) i += size;
  if (i < 0 || i >= size) throw py::index_error("maru: Prefix index out of range");
  return static_cast<size_t>(i);
}

}  // namespace

void Prefix::CheckLive() const {
  h_->conn->CheckFork();
  if (h_->released) throw py::value_error("maru: operation on a released Prefix");
}

py::list Prefix::Sizes() const {
  CheckLive();
  py::list out(h_->chunks.size());
  for (size_t i = 0; i < h_->chunks.size(); ++i) {
    PyObject *size = PyLong_FromUnsignedLongLong(maru_chunk_size(h_->chunks[i]));
    if (!size) throw py::error_already_set();
    PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), size);
  }
  return out;
}

py::object Prefix::View(Py_ssize_t i) {
  CheckLive();
  const size_t at = Index(i, h_->chunks.size());
  py::object exporter = py::cast(std::make_unique<PrefixView>(h_, at));
  PyObject *mv = PyMemoryView_FromObject(exporter.ptr());
  if (!mv) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(mv);
}

std::vector<int> Prefix::ReadIntoBatch(const py::list &list) {
  CheckLive();
  if (list.size() > MARU_BATCH_MAX) ThrowErrno(-E2BIG);
  // The buffers first: taking them may run Python code (a tensor's
  // attributes), which must not happen while `mu` is held.
  std::vector<std::unique_ptr<ContiguousBuffer>> buffers;
  std::vector<size_t> index;
  std::vector<maru_read_op_t> ops;
  for (py::handle item : list) {
    py::tuple op = py::reinterpret_borrow<py::object>(item).cast<py::tuple>();
    if (op.size() != 3) throw py::value_error("maru: an op is (index, buffer, chunk_offset)");
    index.push_back(Index(op[0].cast<Py_ssize_t>(), h_->chunks.size()));
    buffers.push_back(std::make_unique<ContiguousBuffer>(op[1], /*writable=*/true));
    ops.push_back(
        {nullptr, buffers.back()->data(), op[2].cast<uint64_t>(), buffers.back()->size()});
  }
  // Taken with the GIL held (its holders never wait for the GIL), before
  // the handles are read: no release frees them until the copies are done.
  std::unique_lock<std::mutex> lock(h_->mu);
  CheckLive();  // released meanwhile, by another thread?
  for (size_t i = 0; i < ops.size(); ++i) ops[i].chunk = h_->chunks[index[i]];
  std::vector<int> results(ops.size(), 0);
  py::gil_scoped_release nogil;
  // The whole batch in one call; only if it fails, each op alone to tell
  // which failed and why.
  if (maru_read_into_batch(ops.data(), ops.size()) < 0)
    for (size_t i = 0; i < ops.size(); i++) results[i] = maru_read_into_batch(&ops[i], 1);
  lock.unlock();  // before the GIL is taken again
  return results;
}

size_t Prefix::LeaseCheck() {
  std::unique_lock<std::mutex> lock(h_->mu);  // as in ReadIntoBatch
  CheckLive();
  py::gil_scoped_release nogil;
  size_t held = 0;
  while (held < h_->chunks.size() && maru_lease_check(h_->chunks[held]) == 0) ++held;
  lock.unlock();  // before the GIL is taken again
  return held;
}

void Prefix::Release() {
  if (h_->released) return;
  h_->conn->CheckFork();
  std::unique_lock<std::mutex> lock(h_->mu);  // as in ReadIntoBatch
  h_->released = true;
  std::vector<maru_chunk_t *> now;
  for (size_t i = 0; i < h_->chunks.size(); ++i)
    if (h_->views[i] == 0) now.push_back(std::exchange(h_->chunks[i], nullptr));
  py::gil_scoped_release nogil;
  maru_release_batch(now.data(), now.size(), nullptr);
  lock.unlock();  // before the GIL is taken again
}

std::vector<const char *> PathArray(py::handle paths, py::tuple *hold) {
  if (PyUnicode_Check(paths.ptr()) || PyBytes_Check(paths.ptr()))
    throw py::type_error("maru: paths must be a sequence of str, not one str");
  // A tuple of the very str objects: they outlive the call whatever the
  // caller does to its list meanwhile (the GIL is released during it).
  PyObject *t = PySequence_Tuple(paths.ptr());
  if (!t) throw py::error_already_set();
  *hold = py::reinterpret_steal<py::tuple>(t);
  const Py_ssize_t n = PyTuple_GET_SIZE(t);
  std::vector<const char *> out(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *s = PyTuple_GET_ITEM(t, i);
    if (!PyUnicode_Check(s)) throw py::type_error("maru: paths must be str");
    Py_ssize_t len = 0;
    const char *utf8 = PyUnicode_AsUTF8AndSize(s, &len);
    if (!utf8) throw py::error_already_set();
    if (strlen(utf8) != static_cast<size_t>(len))  // as CPath() says it
      throw py::value_error("maru: embedded null byte in " +
                            py::repr(py::handle(s)).cast<std::string>());
    out[static_cast<size_t>(i)] = utf8;
  }
  return out;
}

std::unique_ptr<Prefix> LookupViews(const std::shared_ptr<SharedConnection> &s, py::handle paths) {
  py::tuple hold;
  std::vector<const char *> cpaths = PathArray(paths, &hold);
  auto h = std::make_shared<PrefixHandles>();
  h->conn = s;
  h->chunks.resize(cpaths.size());
  size_t hits = 0;
  int rc;
  {
    py::gil_scoped_release nogil;
    rc = maru_lookup_prefix(s->get(), cpaths.data(), cpaths.size(), h->chunks.data(), &hits);
  }
  h->chunks.resize(rc == 0 ? hits : 0);
  h->views.assign(h->chunks.size(), 0);
  Check(rc);
  return std::make_unique<Prefix>(std::move(h));
}

void RegisterPrefix(py::module_ &m) {
  py::class_<PrefixView> view(m, "PrefixView", py::buffer_protocol(),
                              "The exporter of one chunk of a Prefix (see Prefix.__getitem__).");
  auto *heap = reinterpret_cast<PyHeapTypeObject *>(view.ptr());
  heap->as_buffer.bf_getbuffer = PrefixViewGetBuffer;
  heap->as_buffer.bf_releasebuffer = nullptr;
  py::class_<Prefix>(m, "Prefix",
                     "The chunks of one lookup_views(): one object, given back with one call.")
      .def("__len__", &Prefix::size)
      .def("__getitem__", &Prefix::View, py::arg("i"),
           "A read-only memoryview of chunk i; it holds that chunk's lease while it lives.")
      .def_property_readonly("released", &Prefix::released)
      .def_property_readonly("sizes", &Prefix::Sizes, "Bytes in each chunk.")
      .def("read_into_batch", &Prefix::ReadIntoBatch, py::arg("ops"),
           "maru_read_into_batch() of (index, buffer, chunk_offset) ops: 0 or -errno per op.")
      .def("lease_check", &Prefix::LeaseCheck,
           "How many chunks, from the first, certainly held their leases since the lookup.")
      .def("release", &Prefix::Release,
           "Gives the handles back in one call (those a view holds, when it goes).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](Prefix &p, const py::args &) { p.Release(); });
}

}  // namespace maru_py
