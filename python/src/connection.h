// maru._maru.Connection: the calls of maru_direct.h that take a maru_t.
#ifndef MARU_PY_CONNECTION_H
#define MARU_PY_CONNECTION_H

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chunk_handle.h"
#include "prefix.h"
#include "shared_connection.h"

namespace maru_py {

// Every method releases the GIL around its C call and raises OSError (the
// errno's subclass) for a negative errno. Batch methods return one result
// per request: 0 or a negative errno, or a ChunkHandle.
class Connection {
 public:
  Connection(const std::optional<std::string> &target, const std::optional<std::string> &instance);

  ~Connection();
  // Drops this object's reference to the SharedConnection.
  void Close();
  bool closed() const { return !conn_; }

  std::unique_ptr<ChunkHandle> Create(const std::string &path, uint64_t size,
                                      const std::optional<std::string> &parent, uint32_t mode,
                                      int checksum, uint32_t flags, uint32_t parts);
  std::unique_ptr<ChunkHandle> Alloc(uint64_t size, uint32_t mode, int checksum, uint32_t flags);
  std::unique_ptr<ChunkHandle> Open(const std::string &path);
  // maru_open_partial(): a chunk that is sealed or being written in parts.
  std::unique_ptr<ChunkHandle> OpenPartial(const std::string &path);
  // Leases for the longest existing prefix of `paths`.
  std::vector<std::unique_ptr<ChunkHandle>> LookupPrefix(const std::vector<std::string> &paths);
  // The same as one Prefix object (prefix.h); `paths` a sequence of str.
  std::unique_ptr<Prefix> LookupViews(pybind11::handle paths);
  // `paths`: a sequence of str, read in place (PathArray).
  size_t CountPrefix(pybind11::handle paths);
  // (ChunkHandle or None, 0 or a negative errno) per request.
  pybind11::list CreateBatch(const std::vector<std::string> &paths,
                             const std::vector<uint64_t> &sizes,
                             const std::vector<std::optional<std::string>> &parents, uint32_t mode,
                             int checksum, uint32_t flags, uint32_t parts);

  void Unlink(const std::string &path);
  void Pin(const std::string &path, uint64_t ttl_ms);
  void Unpin(const std::string &path);
  std::vector<int> PinBatch(const std::vector<std::string> &paths, uint64_t ttl_ms);
  std::vector<int> UnpinBatch(const std::vector<std::string> &paths);
  std::vector<int> UnlinkBatch(const std::vector<std::string> &paths);
  std::vector<int> HintBatch(const std::vector<std::string> &paths, int hint);

  pybind11::dict PoolInfo();
  // (base address, length, device) per pool mapping of this process.
  pybind11::list PoolRegions();

 private:
  std::unique_ptr<ChunkHandle> OpenWith(const std::string &path,
                                        int (*open)(maru_t *, const char *, maru_chunk_t **));
  // The SharedConnection, for one call: raises after close() or in a forked child.
  std::shared_ptr<SharedConnection> Live() const;

  std::shared_ptr<SharedConnection> conn_;
};

void RegisterConnection(pybind11::module_ &m);

}  // namespace maru_py

#endif  // MARU_PY_CONNECTION_H
