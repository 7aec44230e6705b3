/* The C side of python/bench/bench_overhead.py: the same calls as the
 * Python loops there, straight on libmaru_direct, so that the ratio
 * Python/C is the cost of the binding and the interpreter alone.
 *   overhead_loop SERVER DIR ROUNDS CALLS BIG_BYTES
 * Expects DIR/k0..k127 stored (the script does it). Prints one JSON line:
 * microseconds per call, medians over ROUNDS rounds of CALLS calls (the
 * 32 MiB store and load: one call a round; the releases of a lookup's
 * chunks: per key, one by one and batched). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "maru_direct.h"

#define KEYS 128

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return v[n / 2];
}

static int fail(const char *what, int rc) {
  fprintf(stderr, "overhead_loop: %s: %s\n", what, maru_strerror(rc));
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: overhead_loop SERVER DIR ROUNDS CALLS BIG_BYTES\n");
    return 2;
  }
  const char *dir = argv[2];
  const int rounds = atoi(argv[3]), calls = atoi(argv[4]);
  const uint64_t big = strtoull(argv[5], NULL, 10);
  if (rounds < 1 || calls < 2 || big == 0) {
    fprintf(stderr, "overhead_loop: ROUNDS >= 1, CALLS >= 2 and BIG_BYTES > 0, please\n");
    return 2;
  }
  maru_t *m;
  int rc = maru_connect(argv[1], &m);
  if (rc) return fail("connect", rc);
  static char names[KEYS][256];
  const char *keys[KEYS];
  for (int i = 0; i < KEYS; ++i) {
    snprintf(names[i], sizeof(names[i]), "%s/k%d", dir, i);
    keys[i] = names[i];
  }
  char big_path[256];
  snprintf(big_path, sizeof(big_path), "%s/big-c", dir);
  double *open_us = calloc((size_t)rounds, sizeof(double));
  double *count_us = calloc((size_t)rounds, sizeof(double));
  double *store_us = calloc((size_t)rounds, sizeof(double));
  double *load_us = calloc((size_t)rounds, sizeof(double));
  double *lookup_us = calloc((size_t)rounds, sizeof(double));
  double *each_us = calloc((size_t)rounds, sizeof(double));
  double *batch_us = calloc((size_t)rounds, sizeof(double));
  char *src = malloc(big), *dst = malloc(big);
  if (!open_us || !count_us || !store_us || !load_us || !lookup_us || !each_us || !batch_us ||
      !src || !dst)
    return fail("memory", -12);
  memset(src, 7, big);
  memset(dst, 0, big);
  /* Warm-up, untimed: the Python side has run its calls before (it is one
   * long-lived process), this process has just started. */
  for (int i = 0; i < calls; ++i) {
    maru_chunk_t *c;
    size_t n = 0;
    if ((rc = maru_open(m, keys[i % KEYS], &c))) return fail("open", rc);
    maru_release(c);
    if ((rc = maru_count_prefix(m, keys, KEYS, &n))) return fail("count_prefix", rc);
  }
  /* In the order of the Python loops: all rounds of one call, then the next. */
  for (int r = 0; r < rounds; ++r) {
    double t0 = now_us();
    for (int i = 0; i < calls; ++i) {
      maru_chunk_t *c;
      if ((rc = maru_open(m, keys[i % KEYS], &c))) return fail("open", rc);
      maru_release(c);
    }
    open_us[r] = (now_us() - t0) / calls;
  }
  for (int r = 0; r < rounds; ++r) {
    double t0 = now_us();
    for (int i = 0; i < calls; ++i) {
      size_t n = 0;
      if ((rc = maru_count_prefix(m, keys, KEYS, &n)) || n != KEYS) return fail("count_prefix", rc);
    }
    count_us[r] = (now_us() - t0) / calls;
  }
  maru_chunk_t *found[KEYS];
  for (int r = 0; r < rounds; ++r) {
    double t0 = now_us();
    for (int i = 0; i < calls; ++i) {
      size_t n = 0;
      if ((rc = maru_lookup_prefix(m, keys, KEYS, found, &n)) || n != KEYS)
        return fail("lookup_prefix", rc);
      maru_release_batch(found, n, NULL);
    }
    lookup_us[r] = (now_us() - t0) / calls;
  }
  /* The releases alone, one by one and batched in turns (the lookups untimed). */
  for (int r = 0; r < rounds; ++r) {
    double each = 0, batch = 0;
    for (int i = 0; i < calls; ++i) {
      size_t n = 0;
      if ((rc = maru_lookup_prefix(m, keys, KEYS, found, &n)) || n != KEYS)
        return fail("lookup_prefix", rc);
      double t0 = now_us();
      if (i % 2 == 0) {
        for (size_t j = 0; j < n; ++j) maru_release(found[j]);
        each += now_us() - t0;
      } else {
        maru_release_batch(found, n, NULL);
        batch += now_us() - t0;
      }
    }
    each_us[r] = each / ((calls + 1) / 2) / KEYS;
    batch_us[r] = batch / (calls / 2) / KEYS;
  }
  for (int r = 0; r < rounds; ++r) {
    double t0 = now_us();
    maru_chunk_t *c;
    if ((rc = maru_create(m, big_path, big, &c))) return fail("create", rc);
    /* The library's copy, as Chunk.write makes it. */
    if ((rc = maru_write_from(c, src, 0, big))) return fail("write_from", rc);
    if ((rc = maru_seal(c))) return fail("seal", rc);
    maru_release(c);
    store_us[r] = now_us() - t0;
    t0 = now_us();
    if ((rc = maru_open(m, big_path, &c))) return fail("open big", rc);
    memcpy(dst, maru_chunk_data(c), big);
    maru_release(c);
    load_us[r] = now_us() - t0;
    if ((rc = maru_unlink(m, big_path))) return fail("unlink", rc);
  }
  printf(
      "{\"open_release_us\":%.3f,\"count_prefix_128_us\":%.3f,\"store_us\":%.1f,\"load_us\":%.1f,"
      "\"lookup_release_128_us\":%.3f,\"release_us_per_key\":[%.4f,%.4f]}\n",
      median(open_us, rounds), median(count_us, rounds), median(store_us, rounds),
      median(load_us, rounds), median(lookup_us, rounds), median(each_us, rounds),
      median(batch_us, rounds));
  maru_disconnect(m);
  return 0;
}
