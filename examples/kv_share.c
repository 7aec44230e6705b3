/*
 * kv_share: the main job's worker. Stands in for an inference engine that
 * shares KV-cache chunks through Maru.
 *
 *   kv_share SERVER prefill MODEL PROMPT CHUNKS SIZE
 *       computes CHUNKS chunks of a prompt (a byte pattern here) and stores
 *       each as a child of the one before, skipping chunks already cached.
 *   kv_share SERVER decode MODEL PROMPT CHUNKS SIZE
 *       looks the prompt's chunks up in one round trip and reads the cached
 *       prefix in place, checking every byte.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "maru_direct.h"

static void chunk_path(char *out, size_t len, const char *model, const char *prompt, int i) {
  snprintf(out, len, "/%s/%s@%04d", model, prompt, i);
}

static uint64_t pattern(const char *path, uint64_t i) {
  uint64_t h = 1469598103934665603ull;
  for (const char *p = path; *p; ++p) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  return h + i * 0x9e3779b97f4a7c15ull;
}

static int prefill(maru_t *m, const char *model, const char *prompt, int chunks, uint64_t size) {
  char path[512], parent[512];
  int stored = 0;
  for (int i = 0; i < chunks; ++i) {
    chunk_path(path, sizeof path, model, prompt, i);
    maru_chunk_t *c;
    int rc = i == 0 ? maru_create(m, path, size, &c) : maru_create_child(m, path, parent, size, &c);
    if (rc == -EEXIST) { /* another worker computed it: reuse */
      strcpy(parent, path);
      continue;
    }
    if (rc) {
      fprintf(stderr, "kv_share: create %s: %s\n", path, maru_strerror(rc));
      return 1;
    }
    uint64_t *data = maru_chunk_data(c);
    for (uint64_t w = 0; w < size / 8; ++w) data[w] = pattern(path, w);
    rc = maru_seal(c);
    maru_release(c);
    if (rc) {
      fprintf(stderr, "kv_share: seal %s: %s\n", path, maru_strerror(rc));
      return 1;
    }
    ++stored;
    strcpy(parent, path);
  }
  printf("prefill %-10s stored %d of %d chunks (the rest were cached)\n", prompt, stored, chunks);
  return 0;
}

static int decode(maru_t *m, const char *model, const char *prompt, int chunks, uint64_t size) {
  char(*names)[512] = calloc((size_t)chunks, sizeof *names);
  const char **paths = calloc((size_t)chunks, sizeof *paths);
  maru_chunk_t **out = calloc((size_t)chunks, sizeof *out);
  for (int i = 0; i < chunks; ++i) {
    chunk_path(names[i], sizeof names[i], model, prompt, i);
    paths[i] = names[i];
  }
  size_t hits = 0;
  int rc = maru_lookup_prefix(m, paths, (size_t)chunks, out, &hits);
  if (rc) {
    fprintf(stderr, "kv_share: lookup: %s\n", maru_strerror(rc));
    return 1;
  }
  int bad = 0;
  for (size_t i = 0; i < hits; ++i) {
    const uint64_t *data = maru_chunk_data(out[i]);
    for (uint64_t w = 0; w < size / 8 && !bad; ++w) bad = data[w] != pattern(paths[i], w);
    maru_release(out[i]);
  }
  if (hits == 0)
    printf("decode  %-10s nothing cached: all %d chunks must be computed\n", prompt, chunks);
  else
    printf("decode  %-10s reused %zu of %d chunks in place%s\n", prompt, hits, chunks,
           bad ? " -- BYTES DIFFER" : ", bytes verified");
  free(names);
  free(paths);
  free(out);
  return bad;
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: kv_share SERVER prefill|decode MODEL PROMPT CHUNKS SIZE\n");
    return 2;
  }
  int chunks = atoi(argv[5]);
  uint64_t size = strtoull(argv[6], NULL, 0);
  if (chunks <= 0 || size == 0 || size % 8) {
    fprintf(stderr, "kv_share: CHUNKS must be positive and SIZE a positive multiple of 8\n");
    return 2;
  }
  maru_t *m;
  int rc = maru_connect(argv[1], &m);
  if (rc) {
    fprintf(stderr, "kv_share: connect %s: %s\n", argv[1], maru_strerror(rc));
    return 1;
  }
  if (strcmp(argv[2], "prefill") == 0)
    rc = prefill(m, argv[3], argv[4], chunks, size);
  else if (strcmp(argv[2], "decode") == 0)
    rc = decode(m, argv[3], argv[4], chunks, size);
  else
    rc = 2;
  maru_disconnect(m);
  return rc;
}
