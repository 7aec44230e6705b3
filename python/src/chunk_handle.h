// A chunk handle (maru_chunk_t) as a Python buffer exporter.
#ifndef MARU_PY_CHUNK_HANDLE_H
#define MARU_PY_CHUNK_HANDLE_H

#include <pybind11/pybind11.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "shared_connection.h"

namespace maru_py {

// Owns one maru_chunk_t and with it the lease (or the reservation) on its
// bytes. Every buffer view of it (memoryview, numpy array, torch tensor)
// holds a reference to this object, so the handle is released, in the
// destructor, only when the last view is gone: no view ever points at bytes
// the pool may have reused. It also holds the shared connection, which keeps
// the pool mapped for as long.
class ChunkHandle {
 public:
  ChunkHandle(std::shared_ptr<SharedConnection> conn, maru_chunk_t *c, bool writable);
  ~ChunkHandle();
  ChunkHandle(const ChunkHandle &) = delete;
  ChunkHandle &operator=(const ChunkHandle &) = delete;

  uint64_t size() const { return size_; }
  uintptr_t data_ptr() const { return reinterpret_cast<uintptr_t>(data_); }
  bool writable() const { return writable_; }
  bool empty() const { return empty_; }
  const std::shared_ptr<SharedConnection> &connection() const { return conn_; }
  maru_chunk_t *handle() const { return c_; }

  // maru_seal(); the chunk becomes read-only.
  void Seal();
  // maru_publish(): names a chunk from maru_alloc() and seals it.
  void Publish(const std::string &path, const std::optional<std::string> &parent);
  // Copies a buffer of the caller into a writable chunk at `offset`, with
  // the GIL released (maru_write_from(): megabytes, streamed into the pool).
  void Write(pybind11::object src, uint64_t offset);
  // maru_read_into() into a writable buffer of the caller.
  void ReadInto(pybind11::object dst, uint64_t offset);
  // Layer-wise (maru_chunk_parts, maru_publish_part, maru_wait_part).
  uint32_t parts() const { return maru_chunk_parts(c_); }
  void PublishPart(uint32_t upto);
  // timeout_ms < 0: no limit. The GIL is released while it waits.
  void WaitPart(uint32_t part, int timeout_ms);
  // maru_verify(): false if the bytes no longer match the sealed checksum.
  bool Verify();
  // maru_lease_check(): raises OSError(ESTALE) if the bytes read so far may
  // not have been the chunk's (the lease may have lapsed meanwhile).
  void LeaseCheck();
  // Before exporting the bytes as a buffer: raises if they cannot be.
  void PrepareBuffer();
  void *data() const { return data_; }

  // After a batch seal: the same state change as Seal() for a chunk that
  // sealed (the caller holds the lock).
  void MarkSealed();
  std::mutex &mutex() { return mu_; }

 private:
  // The GIL is held; raises ForkError in a forked child.
  void CheckUsable() const;
  // Re-reads the data pointer, which may move when a chunk is sealed.
  void Refresh();

  std::shared_ptr<SharedConnection> conn_;
  maru_chunk_t *c_;
  std::mutex mu_;  // a maru_chunk_t belongs to one thread at a time
  void *data_ = nullptr;
  uint64_t size_ = 0;
  bool writable_;
  bool empty_ = false;  // publish found its allocation gone (ESTALE): holds nothing
};

// maru_seal_batch() of chunks of one connection: 0 or a negative errno each.
std::vector<int> SealBatch(const std::vector<ChunkHandle *> &handles);

// While one is entered on a thread (Client.release_batch), the handles of
// the ChunkHandles that die on that thread are kept, not released, and go in
// one maru_release_batch() when the last batch entered there exits, with the
// GIL released. A ChunkHandle that still has a view does not die, so its handle
// stays held as it would. Batches may exit in any order and on any thread;
// what they keep is shared under the GIL.
struct KeptHandles;
class ReleaseBatch {
 public:
  ReleaseBatch() = default;
  ~ReleaseBatch() { Exit(); }
  ReleaseBatch(const ReleaseBatch &) = delete;
  ReleaseBatch &operator=(const ReleaseBatch &) = delete;

  void Enter();
  // The GIL is held.
  void Exit();
  // Keeps the handle of a ChunkHandle that dies on this thread, the GIL held, for
  // the batches entered on it: false when none is (or out of memory).
  static bool Keep(maru_chunk_t *c, std::shared_ptr<SharedConnection> &conn) noexcept;

 private:
  std::shared_ptr<KeptHandles> kept_;  // the entering thread's, while entered
};

void RegisterChunkHandle(pybind11::module_ &m);

}  // namespace maru_py

#endif  // MARU_PY_CHUNK_HANDLE_H
