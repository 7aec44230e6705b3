#include "util/stream_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace maru {
namespace {

#if defined(__x86_64__)

constexpr size_t kLine = 64, kPage = 4096, kStreams = 4;

// One cache line, src unaligned, dst aligned to 64: SSE2 (every x86-64).
__attribute__((always_inline)) inline void StreamLineSse2(uint8_t *dst, const uint8_t *src) {
  const auto *s = reinterpret_cast<const __m128i *>(src);
  auto *d = reinterpret_cast<__m128i *>(dst);
  const __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1), c = _mm_loadu_si128(s + 2),
                e = _mm_loadu_si128(s + 3);
  _mm_stream_si128(d, a);
  _mm_stream_si128(d + 1, b);
  _mm_stream_si128(d + 2, c);
  _mm_stream_si128(d + 3, e);
}

// The same with AVX: half the instructions, 3-7 % faster here.
__attribute__((target("avx"), always_inline)) inline void StreamLineAvx(uint8_t *dst,
                                                                        const uint8_t *src) {
  const auto *s = reinterpret_cast<const __m256i *>(src);
  auto *d = reinterpret_cast<__m256i *>(dst);
  const __m256i a = _mm256_loadu_si256(s), b = _mm256_loadu_si256(s + 1);
  _mm256_stream_si256(d, a);
  _mm256_stream_si256(d + 1, b);
}

// Four pages at a time, a line of each in turn (as glibc's own large copy
// does): four streams of loads keep the prefetchers busy, and the stores
// fill four write-combining buffers at once. 1.1-1.2x the speed of one
// line after the other, at 32 MiB here. Written once per instruction set
// (a template would call the AVX line out of line, from code not built
// for AVX).
#define MARU_STREAM_BLOCKS(LineCopy)                                             \
  constexpr size_t kBlock = kStreams * kPage;                                    \
  for (; n >= kBlock; n -= kBlock, dst += kBlock, src += kBlock)                 \
    for (size_t line = 0; line < kPage; line += kLine)                           \
      for (size_t p = 0; p < kStreams; ++p)                                      \
        LineCopy(dst + p * kPage + line, src + p * kPage + line);                \
  for (; n >= kLine; n -= kLine, dst += kLine, src += kLine) LineCopy(dst, src); \
  if (n) memcpy(dst, src, n);

__attribute__((target("avx"))) void StreamBlocksAvx(uint8_t *dst, const uint8_t *src, size_t n) {
  MARU_STREAM_BLOCKS(StreamLineAvx)
}

void StreamBlocksSse2(uint8_t *dst, const uint8_t *src, size_t n) {
  MARU_STREAM_BLOCKS(StreamLineSse2)
}

#undef MARU_STREAM_BLOCKS

#endif

}  // namespace

void StreamCopy(void *dst, const void *src, size_t n) {
#if defined(__x86_64__)
  if (n >= kStreamCopyMin) {
    auto *d = static_cast<uint8_t *>(dst);
    const auto *s = static_cast<const uint8_t *>(src);
    // Up to the first 64-byte boundary of dst with a plain copy.
    const size_t head = (kLine - reinterpret_cast<uintptr_t>(d) % kLine) % kLine;
    memcpy(d, s, head);
    static const bool avx = __builtin_cpu_supports("avx");
    (avx ? StreamBlocksAvx : StreamBlocksSse2)(d + head, s + head, n - head);
    _mm_sfence();  // streamed stores are weakly ordered: done before we say so
    return;
  }
#endif
  memcpy(dst, src, n);
}

}  // namespace maru
