// Copies between chunks and the caller's memory: reads gathered into the
// caller's buffers, writes scattered into writable chunks, batched.
#include "read_and_write.h"

#include <cstring>
#include <vector>

#include "chunk_handle.h"
#include "handles.h"
#include "util/status.h"
#include "util/stream_copy.h"

using maru::direct::AddTransfers;
using maru::direct::CheckReadOp;
using maru::direct::CheckStillLeased;
using maru::direct::CheckWriteOp;

namespace maru::direct {

int CheckReadOp(const maru_read_op_t &op) {
  const maru_chunk_t *c = op.chunk;
  if (!c || (!op.dst && op.len) || op.off > c->size || op.len > c->size - op.off) return -EINVAL;
  // A chunk still being written: only the parts seen published.
  if (c->partial && op.off + op.len > c->published * (c->size / c->parts)) return -EBUSY;
  return 0;
}

int CheckWriteOp(const maru_write_op_t &op) {
  const maru_chunk_t *c = op.chunk;
  if (!c || !c->writing || !c->data || (!op.src && op.len) || op.off > c->size ||
      op.len > c->size - op.off)
    return -EINVAL;
  return 0;
}

}  // namespace maru::direct

extern "C" {

int maru_write_from_batch(const maru_write_op_t *ops, size_t n) {
  if (!ops && n) return -EINVAL;
  for (size_t i = 0; i < n; ++i)
    if (int rc = CheckWriteOp(ops[i]); rc < 0) return rc;
  // A writer's bytes are local: the pool mapping, streamed past the caches
  // (a fresh extent is not cached: a plain copy would read it in first),
  // or a remote chunk's staging buffer, reused and likely cached: copied.
  for (size_t i = 0; i < n; ++i) {
    const maru_write_op_t &op = ops[i];
    if (!op.len) continue;
    uint8_t *dst = op.chunk->data + op.off;
    if (!op.chunk->remote && op.chunk->m->stream_writes)
      maru::StreamCopy(dst, op.src, op.len);
    else
      memcpy(dst, op.src, op.len);
  }
  return 0;
}

int maru_write_from(maru_chunk_t *c, const void *src, uint64_t off, uint64_t len) {
  maru_write_op_t op{c, src, off, len};
  return maru_write_from_batch(&op, 1);
}

int maru_read_into(maru_chunk_t *c, void *dst, uint64_t off, uint64_t len) {
  maru_read_op_t op{c, dst, off, len};
  return maru_read_into_batch(&op, 1);
}

int maru_read_into_batch(const maru_read_op_t *ops, size_t n) {
  if (!ops && n) return -EINVAL;
  std::vector<maru::RemotePool::Transfer> transfers;
  maru_t *m = nullptr;
  for (size_t i = 0; i < n; ++i)
    if (int rc = CheckReadOp(ops[i]); rc < 0) return rc;
  for (size_t i = 0; i < n; ++i) {
    const maru_read_op_t &op = ops[i];
    maru_chunk_t *c = op.chunk;
    if (c->data) {
      if (op.len) memcpy(op.dst, c->data + op.off, op.len);
      continue;
    }
    if (m && m != c->m) return -EINVAL;  // one connection per batch
    m = c->m;
    AddTransfers(c, op.off, op.len, static_cast<uint8_t *>(op.dst), &transfers);
  }
  if (transfers.empty()) return 0;
  // Straight into the callers' buffers, all in flight at once.
  maru::Status s = m->remote->Get(m->client->session(), transfers);
  if (!s.ok()) return maru::ReturnCode(s);
  for (size_t i = 0; i < n; ++i)
    if (!ops[i].chunk->data)
      if (int rc = CheckStillLeased(ops[i].chunk); rc < 0) return rc;
  return 0;
}

}  // extern "C"
