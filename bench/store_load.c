/* An independent client of libmaru_direct (its public calls only, so it
 * builds against any version): N chunks stored and loaded one after the
 * other, each step timed, beside plain copies of the same size in the same
 * round. bench/store-load.sh builds it against two builds and runs them in
 * turns.
 *   store_load SERVER N SIZE_MIB memcpy|write_from
 * Store: create, fill (memcpy into maru_chunk_data(), or the library's
 * maru_write_from_batch()), seal, release. Load: open, maru_read_into()
 * into the same buffer every time, release; the chunk is evicted from the
 * caches before (as one written long ago is). Chunks are kept: past the
 * pool's capacity creates evict. Baselines, each round: memcpy between
 * cached buffers (after an untimed copy), memcpy into a buffer out of the
 * cache (a fresh extent is), memcpy out of a buffer out of the cache into
 * the load's buffer. Prints one JSON line of medians (ms) and ratios. */
#include <emmintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "maru_direct.h"

enum { kMemcpyHot, kMemcpyToCold, kMemcpyFromCold, kCreate, kFill, kSeal, kReleaseW,
       kOpen, kCopy, kReleaseR, kStore, kLoad, kSteps };
static const char *const kNames[kSteps] = {
    "memcpy_hot_ms", "memcpy_to_uncached_ms", "memcpy_from_uncached_ms", "create_ms", "fill_ms",
    "seal_ms", "release_w_ms", "open_ms", "copy_out_ms", "release_r_ms", "store_ms", "load_ms"};

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return v[n / 2];
}

static void uncache(const void *p, size_t n) {
  for (size_t i = 0; i < n; i += 64) _mm_clflush((const char *)p + i);
  _mm_mfence();
}

static char *buffer(size_t n, int seed) {
  char *p = aligned_alloc(4096, n);
  if (p) memset(p, seed, n);
  return p;
}

static int fail(const char *what, int rc) {
  fprintf(stderr, "store_load: %s: %s\n", what, maru_strerror(rc));
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: store_load SERVER N SIZE_MIB memcpy|write_from\n");
    return 2;
  }
  const int n = atoi(argv[2]);
  const size_t size = (size_t)atoi(argv[3]) << 20;
  const int lib_fill = strcmp(argv[4], "write_from") == 0;
  if (n < 1 || size == 0) return fail("arguments", -22);
  maru_t *m;
  int rc = maru_connect(argv[1], &m);
  if (rc) return fail("connect", rc);
  char *src = buffer(size, 1), *hot = buffer(size, 2), *cold = buffer(size, 3);
  double *t[kSteps];
  for (int s = 0; s < kSteps; ++s) t[s] = calloc((size_t)n, sizeof(double));
  if (!src || !hot || !cold) return fail("memory", -12);
  for (int r = -2; r < n; ++r) { /* two rounds to warm up, untimed */
    double x[kSteps + 1];
    memcpy(hot, src, size);
    x[0] = now_ms();
    memcpy(hot, src, size);
    x[1] = now_ms();
    uncache(cold, size);
    double a = now_ms();
    memcpy(cold, src, size);
    double b = now_ms();
    uncache(cold, size);
    double c = now_ms();
    memcpy(hot, cold, size);
    double d = now_ms();
    char path[96];
    snprintf(path, sizeof(path), "/store-load/%d/c%d", (int)getpid(), r + 2);
    maru_chunk_t *ch;
    double s0 = now_ms();
    if ((rc = maru_create(m, path, size, &ch))) return fail("create", rc);
    double s1 = now_ms();
    if (lib_fill) {
      maru_write_op_t op = {ch, src, 0, size};
      if ((rc = maru_write_from_batch(&op, 1))) return fail("write_from_batch", rc);
    } else {
      memcpy(maru_chunk_data(ch), src, size);
    }
    double s2 = now_ms();
    if ((rc = maru_seal(ch))) return fail("seal", rc);
    double s3 = now_ms();
    uncache(maru_chunk_data(ch), size); /* untimed: as if written long ago */
    double s4 = now_ms();
    maru_release(ch);
    double s5 = now_ms();
    if ((rc = maru_open(m, path, &ch))) return fail("open", rc);
    double l1 = now_ms();
    if ((rc = maru_read_into(ch, hot, 0, size))) return fail("read_into", rc);
    double l2 = now_ms();
    maru_release(ch);
    double l3 = now_ms();
    if (r < 0) continue;
    t[kMemcpyHot][r] = x[1] - x[0];
    t[kMemcpyToCold][r] = b - a;
    t[kMemcpyFromCold][r] = d - c;
    t[kCreate][r] = s1 - s0;
    t[kFill][r] = s2 - s1;
    t[kSeal][r] = s3 - s2;
    t[kReleaseW][r] = s5 - s4;
    t[kOpen][r] = l1 - s5;
    t[kCopy][r] = l2 - l1;
    t[kReleaseR][r] = l3 - l2;
    t[kStore][r] = (s3 - s0) + (s5 - s4);
    t[kLoad][r] = l3 - s5;
  }
  maru_disconnect(m);
  double med[kSteps];
  for (int s = 0; s < kSteps; ++s) med[s] = median(t[s], n);
  printf("{");
  for (int s = 0; s < kSteps; ++s) printf("\"%s\": %.4f, ", kNames[s], med[s]);
  printf("\"store_vs_memcpy_hot\": %.3f, \"load_vs_memcpy_hot\": %.3f, "
         "\"store_vs_memcpy_to_uncached\": %.3f, \"load_vs_memcpy_from_uncached\": %.3f}\n",
         med[kMemcpyHot] / med[kStore], med[kMemcpyHot] / med[kLoad],
         med[kMemcpyToCold] / med[kStore], med[kMemcpyFromCold] / med[kLoad]);
  return 0;
}
