// StreamCopy: a copy of many megabytes into memory the CPU has not cached,
// with stores that bypass the caches (non-temporal stores).
//
// Why: a plain copy into memory that is not in the cache first reads each
// destination line in (a read for ownership), so it moves the destination
// bytes twice. A chunk just allocated in the pool is such memory: its
// extent was last used long ago, by another chunk. Measured on these
// machines (docs/benchmarks.md, "The data path at the copy limit"), 32 MiB:
// memcpy into an uncached destination 8.4-9 GB/s, streamed 12-14 GB/s; but
// into a destination that *is* cached, streaming falls to 6-9 GB/s against
// memcpy's 14. So only the library's writes into the pool stream, and only
// from kStreamCopyMin bytes on (more than a core's L2 here), where the
// destination is unlikely to be cached anyway.
#pragma once

#include <cstddef>

namespace maru {

constexpr size_t kStreamCopyMin = 4u << 20;

// Copies n bytes from src to dst (which must not overlap), streaming where
// the CPU allows (x86-64: always) and n >= kStreamCopyMin; memcpy otherwise.
// The stores are fenced before it returns: another process that is told of
// the bytes afterwards sees them.
void StreamCopy(void *dst, const void *src, size_t n);

}  // namespace maru
