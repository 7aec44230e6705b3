// PoolBufvec: a FUSE buffer vector over the pool bytes behind a range of a
// file, so that replies and writes move data between the pool and the
// kernel without a staging buffer.
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>

#include <cstdint>
#include <vector>

#include "alloc/extent_map.h"
#include "client/pool_map.h"

namespace maru {

// One buffer per extent piece of [start, start+len): the pool memory, or
// (`as_fd`, for replies where the device is a file) the device file itself,
// so that the kernel can splice the bytes instead of the daemon copying them.
class PoolBufvec {
 public:
  PoolBufvec(const PoolMap &pool, const ExtentMap &map, uint64_t start, uint64_t len,
             bool as_fd = false) {
    size_t pieces = 0;
    map.ForEachPiece(start, len, [&](uint32_t, uint64_t, uint64_t, uint64_t) { ++pieces; });
    storage_.resize(sizeof(fuse_bufvec) + pieces * sizeof(fuse_buf));
    fuse_bufvec *v = get();
    v->count = v->idx = v->off = 0;
    map.ForEachPiece(start, len, [&](uint32_t dev, uint64_t at, uint64_t n, uint64_t) {
      v->buf[v->count++] = Piece(*pool.device(dev), at, n, as_fd);
    });
  }
  fuse_bufvec *get() { return reinterpret_cast<fuse_bufvec *>(storage_.data()); }

 private:
  static fuse_buf Piece(const PoolDevice &d, uint64_t at, uint64_t n, bool as_fd) {
    fuse_buf b{};
    b.size = n;
    if (as_fd && !d.is_devdax()) {
      b.flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
      b.fd = d.fd();
      b.pos = static_cast<off_t>(at);
    } else {
      b.mem = d.base() + at;
    }
    return b;
  }

  std::vector<uint8_t> storage_;
};

}  // namespace maru
