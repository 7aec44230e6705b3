#include "connection.h"

#include <pybind11/stl.h>

#include "errors.h"

namespace py = pybind11;

namespace maru_py {

namespace {

std::vector<const char *> CStrings(const std::vector<std::string> &v) {
  std::vector<const char *> out;
  out.reserve(v.size());
  for (const auto &s : v) out.push_back(CPath(s));
  return out;
}

const char *OrNull(const std::optional<std::string> &s) {
  return s ? CPath(*s) : nullptr;
}

maru_create_opts_t CreateOpts(uint32_t mode, int checksum, uint32_t flags, uint32_t parts = 0) {
  maru_create_opts_t opts{};
  opts.parts = parts;
  opts.mode = mode;
  opts.checksum = checksum;
  opts.flags = flags;
  return opts;
}

using PathsCall = int (*)(maru_t *, const char *const *, size_t, int *);

}  // namespace

Connection::Connection(const std::optional<std::string> &target,
                       const std::optional<std::string> &instance) {
  OrNull(target);  // checked for NULs here: they are used without the GIL
  OrNull(instance);
  int rc;
  {
    py::gil_scoped_release nogil;
    rc = SharedConnection::Connect(target, instance, &conn_);
  }
  if (rc < 0) ThrowErrno(rc, target ? &*target : nullptr);
}

Connection::~Connection() {
  if (PyGILState_Check()) Close();
}

void Connection::Close() {
  std::shared_ptr<SharedConnection> last = std::move(conn_);
  // Possibly the last reference: maru_disconnect() talks to the server.
  py::gil_scoped_release nogil;
  last.reset();
}

std::shared_ptr<SharedConnection> Connection::Live() const {
  if (!conn_) throw py::value_error("maru: operation on a closed connection");
  conn_->CheckFork();
  return conn_;
}

std::unique_ptr<ChunkHandle> Connection::Create(const std::string &path, uint64_t size,
                                                const std::optional<std::string> &parent,
                                                uint32_t mode, int checksum, uint32_t flags,
                                                uint32_t parts) {
  auto s = Live();
  const char *cpath = CPath(path);
  maru_create_opts_t opts = CreateOpts(mode, checksum, flags, parts);
  opts.parent = OrNull(parent);
  std::unique_ptr<ChunkHandle> handle;
  int rc;
  {
    py::gil_scoped_release nogil;
    maru_chunk_t *c = nullptr;
    rc = maru_create_ex(s->get(), cpath, size, &opts, &c);
    if (rc == 0) handle = std::make_unique<ChunkHandle>(s, c, /*writable=*/true);
  }
  Check(rc, &path);
  return handle;
}

std::unique_ptr<ChunkHandle> Connection::Alloc(uint64_t size, uint32_t mode, int checksum,
                                               uint32_t flags) {
  auto s = Live();
  maru_create_opts_t opts = CreateOpts(mode, checksum, flags);
  std::unique_ptr<ChunkHandle> handle;
  int rc;
  {
    py::gil_scoped_release nogil;
    maru_chunk_t *c = nullptr;
    rc = maru_alloc(s->get(), size, &opts, &c);
    if (rc == 0) handle = std::make_unique<ChunkHandle>(s, c, /*writable=*/true);
  }
  Check(rc);
  return handle;
}

std::unique_ptr<ChunkHandle> Connection::Open(const std::string &path) {
  return OpenWith(path, &maru_open);
}

std::unique_ptr<ChunkHandle> Connection::OpenPartial(const std::string &path) {
  return OpenWith(path, &maru_open_partial);
}

std::unique_ptr<ChunkHandle> Connection::OpenWith(const std::string &path,
                                                  int (*open)(maru_t *, const char *,
                                                              maru_chunk_t **)) {
  auto s = Live();
  const char *cpath = CPath(path);
  std::unique_ptr<ChunkHandle> handle;
  int rc;
  {
    py::gil_scoped_release nogil;
    maru_chunk_t *c = nullptr;
    rc = open(s->get(), cpath, &c);
    if (rc == 0) handle = std::make_unique<ChunkHandle>(s, c, /*writable=*/false);
  }
  Check(rc, &path);
  return handle;
}

std::vector<std::unique_ptr<ChunkHandle>> Connection::LookupPrefix(
    const std::vector<std::string> &paths) {
  auto s = Live();
  std::vector<const char *> cpaths = CStrings(paths);
  std::vector<std::unique_ptr<ChunkHandle>> handles;
  int rc;
  {
    py::gil_scoped_release nogil;
    std::vector<maru_chunk_t *> out(paths.size(), nullptr);
    size_t hits = 0;
    rc = maru_lookup_prefix(s->get(), cpaths.data(), cpaths.size(), out.data(), &hits);
    if (rc == 0)
      for (size_t i = 0; i < hits; i++)
        handles.push_back(std::make_unique<ChunkHandle>(s, out[i], /*writable=*/false));
  }
  Check(rc);
  return handles;
}

std::unique_ptr<Prefix> Connection::LookupViews(py::handle paths) {
  return maru_py::LookupViews(Live(), paths);
}

size_t Connection::CountPrefix(py::handle paths) {
  auto s = Live();
  py::tuple hold;
  std::vector<const char *> cpaths = PathArray(paths, &hold);
  size_t count = 0;
  int rc;
  {
    py::gil_scoped_release nogil;
    rc = maru_count_prefix(s->get(), cpaths.data(), cpaths.size(), &count);
  }
  Check(rc);
  return count;
}

py::list Connection::CreateBatch(const std::vector<std::string> &paths,
                                 const std::vector<uint64_t> &sizes,
                                 const std::vector<std::optional<std::string>> &parents,
                                 uint32_t mode, int checksum, uint32_t flags, uint32_t parts) {
  if (sizes.size() != paths.size() || (!parents.empty() && parents.size() != paths.size()))
    throw py::value_error("maru: create_batch needs one size (and parent) per path");
  auto s = Live();
  const maru_create_opts_t opts = CreateOpts(mode, checksum, flags, parts);
  std::vector<maru_create_req_t> reqs(paths.size());
  for (size_t i = 0; i < paths.size(); i++) {
    reqs[i].path = CPath(paths[i]);
    reqs[i].size = sizes[i];
    reqs[i].parent = parents.empty() ? nullptr : OrNull(parents[i]);
  }
  std::vector<std::unique_ptr<ChunkHandle>> handles(paths.size());
  int rc;
  {
    py::gil_scoped_release nogil;
    rc = maru_create_batch(s->get(), reqs.data(), reqs.size(), &opts);
    if (rc == 0)
      for (size_t i = 0; i < reqs.size(); i++)
        if (reqs[i].result == 0 && reqs[i].chunk)
          handles[i] = std::make_unique<ChunkHandle>(s, reqs[i].chunk, /*writable=*/true);
  }
  Check(rc);
  py::list out;
  for (size_t i = 0; i < reqs.size(); i++) {
    py::object handle = handles[i] ? py::cast(std::move(handles[i])) : py::none();
    out.append(py::make_tuple(handle, reqs[i].result));
  }
  return out;
}

void Connection::Unlink(const std::string &path) {
  auto s = Live();
  const char *cpath = CPath(path);
  int rc;
  {
    py::gil_scoped_release nogil;
    rc = maru_unlink(s->get(), cpath);
  }
  Check(rc, &path);
}

void Connection::Pin(const std::string &path, uint64_t ttl_ms) {
  auto s = Live();
  const char *cpath = CPath(path);
  int rc;
  {
    py::gil_scoped_release nogil;
    rc = ttl_ms ? maru_pin_ttl(s->get(), cpath, ttl_ms) : maru_pin(s->get(), cpath);
  }
  Check(rc, &path);
}

void Connection::Unpin(const std::string &path) {
  auto s = Live();
  const char *cpath = CPath(path);
  int rc;
  {
    py::gil_scoped_release nogil;
    rc = maru_unpin(s->get(), cpath);
  }
  Check(rc, &path);
}

std::vector<int> Connection::PinBatch(const std::vector<std::string> &paths, uint64_t ttl_ms) {
  auto s = Live();
  std::vector<const char *> cpaths = CStrings(paths);
  std::vector<int> results(paths.size(), 0);
  int rc;
  {
    py::gil_scoped_release nogil;
    rc = maru_pin_batch(s->get(), cpaths.data(), cpaths.size(), ttl_ms, results.data());
  }
  Check(rc);
  return results;
}

static std::vector<int> PathsBatch(maru_t *m, PathsCall call,
                                   const std::vector<std::string> &paths) {
  std::vector<const char *> cpaths = CStrings(paths);
  std::vector<int> results(paths.size(), 0);
  int rc;
  {
    py::gil_scoped_release nogil;
    rc = call(m, cpaths.data(), cpaths.size(), results.data());
  }
  Check(rc);
  return results;
}

std::vector<int> Connection::UnpinBatch(const std::vector<std::string> &paths) {
  auto s = Live();
  return PathsBatch(s->get(), &maru_unpin_batch, paths);
}

std::vector<int> Connection::UnlinkBatch(const std::vector<std::string> &paths) {
  auto s = Live();
  return PathsBatch(s->get(), &maru_unlink_batch, paths);
}

std::vector<int> Connection::HintBatch(const std::vector<std::string> &paths, int hint) {
  auto s = Live();
  std::vector<const char *> cpaths = CStrings(paths);
  std::vector<int> results(paths.size(), 0);
  int rc;
  {
    py::gil_scoped_release nogil;
    rc = maru_hint_batch(s->get(), cpaths.data(), cpaths.size(), hint, results.data());
  }
  Check(rc);
  return results;
}

py::dict Connection::PoolInfo() {
  auto s = Live();
  maru_pool_info_t info{};
  int rc;
  {
    py::gil_scoped_release nogil;
    rc = maru_pool_info(s->get(), &info);
  }
  Check(rc);
  py::dict d;
  d["total"] = info.total;
  d["free"] = info.free;
  d["unit"] = info.unit;
  d["files"] = info.files;
  return d;
}

py::list Connection::PoolRegions() {
  auto s = Live();
  std::vector<maru_region_t> regions;
  int rc;
  {
    py::gil_scoped_release nogil;
    size_t count = 0;
    rc = maru_pool_regions(s->get(), nullptr, 0, &count);
    // A pool does not grow devices while connected; one more try if it did.
    for (int tries = 0; rc == 0 && regions.size() < count && tries < 2; tries++) {
      regions.resize(count);
      rc = maru_pool_regions(s->get(), regions.data(), regions.size(), &count);
    }
    regions.resize(std::min(regions.size(), count));
  }
  Check(rc);
  py::list out;
  for (const maru_region_t &r : regions)
    out.append(py::make_tuple(reinterpret_cast<uintptr_t>(r.base), r.length, r.device));
  return out;
}

void RegisterConnection(py::module_ &m) {
  py::class_<Connection>(m, "Connection",
                         "A connection to maru-server (maru_connect_ex); the pool is mapped\n"
                         "until it is closed and the last chunk of it is gone.")
      .def(py::init<const std::optional<std::string> &, const std::optional<std::string> &>(),
           py::arg("target") = py::none(), py::arg("instance") = py::none())
      .def("close", &Connection::Close)
      .def_property_readonly("closed", &Connection::closed)
      .def("create", &Connection::Create, py::arg("path"), py::arg("size"),
           py::arg("parent") = py::none(), py::arg("mode") = 0, py::arg("checksum") = 0,
           py::arg("flags") = 0, py::arg("parts") = 0)
      .def("alloc", &Connection::Alloc, py::arg("size"), py::arg("mode") = 0,
           py::arg("checksum") = 0, py::arg("flags") = 0)
      .def("open", &Connection::Open, py::arg("path"))
      .def("open_partial", &Connection::OpenPartial, py::arg("path"))
      .def("lookup_prefix", &Connection::LookupPrefix, py::arg("paths"))
      .def("lookup_views", &Connection::LookupViews, py::arg("paths"))
      .def("count_prefix", &Connection::CountPrefix, py::arg("paths"))
      .def("create_batch", &Connection::CreateBatch, py::arg("paths"), py::arg("sizes"),
           py::arg("parents") = std::vector<std::optional<std::string>>(), py::arg("mode") = 0,
           py::arg("checksum") = 0, py::arg("flags") = 0, py::arg("parts") = 0)
      .def("unlink", &Connection::Unlink, py::arg("path"))
      .def("pin", &Connection::Pin, py::arg("path"), py::arg("ttl_ms") = 0)
      .def("unpin", &Connection::Unpin, py::arg("path"))
      .def("pin_batch", &Connection::PinBatch, py::arg("paths"), py::arg("ttl_ms") = 0)
      .def("unpin_batch", &Connection::UnpinBatch, py::arg("paths"))
      .def("unlink_batch", &Connection::UnlinkBatch, py::arg("paths"))
      .def("hint_batch", &Connection::HintBatch, py::arg("paths"), py::arg("hint"))
      .def("pool_info", &Connection::PoolInfo)
      .def("pool_regions", &Connection::PoolRegions);
}

}  // namespace maru_py
