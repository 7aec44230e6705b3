// PoolBufvec: a FUSE buffer vector over the pool bytes behind a range of a
// file, so that replies and writes move data between the pool and the
// kernel without a staging buffer.
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse3/fuse_lowlevel.h>

#include <sys/uio.h>

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

// The same pool bytes as an iovec array, for fuse_reply_iov: the daemon's
// writev to /dev/fuse then copies each piece straight from the pool into the
// reader's pages (or the page cache), however many pieces there are.
// (fuse_reply_data copies a bufvec of more than one memory buffer into a
// staging buffer first.) Files of up to kInline pieces need no allocation.
class PoolIovec {
 public:
  PoolIovec(const PoolMap &pool, const ExtentMap &map, uint64_t start, uint64_t len) {
    map.ForEachPiece(start, len, [&](uint32_t dev, uint64_t at, uint64_t n, uint64_t) {
      Add({pool.device(dev)->base() + at, n});
    });
  }
  const iovec *data() const { return spilled_.empty() ? inline_ : spilled_.data(); }
  int count() const { return count_; }

 private:
  static constexpr int kInline = 8;
  void Add(iovec v) {
    if (count_ < kInline) {
      inline_[count_++] = v;
      return;
    }
    if (spilled_.empty()) spilled_.assign(inline_, inline_ + kInline);
    spilled_.push_back(v);
    ++count_;
  }

  iovec inline_[kInline];
  std::vector<iovec> spilled_;
  int count_ = 0;
};

}  // namespace maru
