// maru._maru.Prefix: the chunks of one maru_lookup_prefix() as one Python
// object, handed back with one call.
//
// Why: a ChunkHandle (and a maru.Chunk over it) per chunk costs the
// interpreter about 0.3 µs per key to make and as much to drop, five times
// what the C library spends on a 128-key lookup. A Prefix makes one object for the
// whole answer; a chunk's bytes get a Python object only when asked for
// (Prefix[i], a memoryview), and its sizes, copies and lease checks are
// one call each for all of them.
#ifndef MARU_PY_PREFIX_H
#define MARU_PY_PREFIX_H

#include <pybind11/pybind11.h>

#include <memory>
#include <mutex>
#include <vector>

#include "shared_connection.h"

namespace maru_py {

// The handles of one lookup. Views (PrefixView) share it. Its fields are
// read and changed with the GIL held; the library is called on its handles
// without the GIL, under `mu`, so that a release on one thread never frees
// a handle another thread's copy or check is using.
struct PrefixHandles {
  std::mutex mu;
  std::shared_ptr<SharedConnection> conn;
  std::vector<maru_chunk_t *> chunks;  // NULL once released
  std::vector<uint32_t> views;         // live views of each chunk
  bool released = false;               // Prefix.release() was called

  ~PrefixHandles();
  // Releases chunk i if it is released and no view holds it any more.
  void Settle(size_t i);
};

// Every method takes and releases the GIL as ChunkHandle's do; a released Prefix
// raises ValueError on use, except release() itself (idempotent).
class Prefix {
 public:
  explicit Prefix(std::shared_ptr<PrefixHandles> h) : h_(std::move(h)) {}

  size_t size() const { return h_->chunks.size(); }
  bool released() const { return h_->released; }
  // Bytes in each chunk.
  pybind11::list Sizes() const;
  // A read-only memoryview of chunk i (negative i from the end). It holds
  // that chunk's lease until it (and every view made from it) is gone,
  // release() or not.
  pybind11::object View(Py_ssize_t i);
  // maru_read_into_batch() of ops (index, buffer, chunk_offset): 0 or a
  // negative errno per op.
  std::vector<int> ReadIntoBatch(const pybind11::list &ops);
  // How many chunks, from the first, certainly held their leases since the
  // lookup (maru_lease_check()): read bytes of the others must be dropped.
  size_t LeaseCheck();
  // Gives every handle back in one maru_release_batch(), but those a view
  // still holds, which go when their last view does.
  void Release();

 private:
  void CheckLive() const;
  std::shared_ptr<PrefixHandles> h_;
};

// Connection.lookup_views(): a Prefix of the longest existing prefix of
// `paths` (a sequence of str), without copying the paths.
std::unique_ptr<Prefix> LookupViews(const std::shared_ptr<SharedConnection> &s,
                                    pybind11::handle paths);

// The UTF-8 of each str of a sequence, valid while `hold` lives: no copy.
// Raises TypeError for a non-str, ValueError for a NUL inside one.
std::vector<const char *> PathArray(pybind11::handle paths, pybind11::tuple *hold);

void RegisterPrefix(pybind11::module_ &m);

}  // namespace maru_py

#endif  // MARU_PY_PREFIX_H
