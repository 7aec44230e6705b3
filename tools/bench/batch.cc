// maru-bench batch: what one round trip for N keys saves over N round trips,
// for storing (create, seal, unlink) and for asking what exists.
#include <cstring>

#include "bench/common.h"
#include "bench/server_bench.h"
#include "util/clock.h"
#include "util/flags.h"

namespace maru::bench {
namespace {

struct Keys {
  std::vector<std::string> names;
  std::vector<const char *> paths;
};

// Microseconds per key of `op`, the median over `rounds`.
template <typename Op>
double PerKey(int64_t rounds, size_t keys, Op &&op) {
  std::vector<double> per_key;
  for (int64_t r = 0; r < rounds; ++r) {
    const int64_t t0 = MonotonicNs();
    if (!op()) return -1;
    per_key.push_back(static_cast<double>(MonotonicNs() - t0) / 1000.0 / static_cast<double>(keys));
  }
  return Quantile(per_key, 0.5);
}

bool StoreOneByOne(maru_t *m, const Keys &k, uint64_t size) {
  for (const char *p : k.paths) {
    maru_chunk_t *c;
    if (maru_create(m, p, size, &c)) return false;
    memset(maru_chunk_data(c), 1, size);
    int rc = maru_seal(c);
    maru_release(c);
    if (rc) return false;
  }
  for (const char *p : k.paths)
    if (maru_unlink(m, p)) return false;
  return true;
}

bool StoreBatched(maru_t *m, const Keys &k, uint64_t size) {
  std::vector<maru_create_req_t> reqs;
  for (const char *p : k.paths) reqs.push_back({p, size, nullptr, nullptr, 0});
  if (maru_create_batch(m, reqs.data(), reqs.size(), nullptr)) return false;
  std::vector<maru_chunk_t *> chunks;
  bool ok = true;
  for (auto &r : reqs) {
    if (r.result) ok = false;
    if (!r.chunk) continue;
    memset(maru_chunk_data(r.chunk), 1, size);
    chunks.push_back(r.chunk);
  }
  std::vector<int> results(k.paths.size());
  ok = ok && maru_seal_batch(chunks.data(), chunks.size(), results.data()) == 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    ok = ok && results[i] == 0;
    maru_release(chunks[i]);
  }
  ok = ok && maru_unlink_batch(m, k.paths.data(), k.paths.size(), results.data()) == 0;
  for (int rc : results) ok = ok && rc == 0;
  return ok;
}

}  // namespace

int RunBatch(int argc, char **argv) {
  ServerBench bench(
      "maru-bench batch [--server ADDRESS] [--keys N] [--rounds R] [--size BYTES] [--json]",
      "Per-key cost of storing (create, seal, unlink) and of asking which keys exist, "
      "one round trip per key against one per batch.");
  int64_t keys = 128, rounds = 20, size = 4096;
  bench.flags().Int("keys", &keys, "keys per batch (at most 4096)");
  bench.flags().Int("rounds", &rounds, "batches timed; the median counts");
  bench.flags().Int("size", &size, "bytes per chunk");
  bench.TakeDir("/maru-bench/batch");
  if (int rc = bench.Parse(argc, argv); rc >= 0) return rc;
  const std::string &server = bench.server(), &dir = bench.dir();
  if (keys <= 0 || keys > MARU_BATCH_MAX || rounds <= 0 || size <= 0)
    return Fail("--keys must be 1..4096, --rounds and --size positive");
  maru_t *m = Connect(server);
  if (!m) return 1;
  Keys k;
  for (int64_t i = 0; i < keys; ++i) k.names.push_back(dir + "/k" + std::to_string(i));
  for (auto &n : k.names) k.paths.push_back(n.c_str());
  const size_t n = k.paths.size();
  const uint64_t bytes = static_cast<uint64_t>(size);
  double store1 = PerKey(rounds, n, [&] { return StoreOneByOne(m, k, bytes); });
  double storeN = PerKey(rounds, n, [&] { return StoreBatched(m, k, bytes); });
  if (store1 < 0 || storeN < 0) return Fail("storing failed (is the pool large enough?)");
  // Stored once more and kept, for the existence checks.
  std::vector<maru_create_req_t> reqs;
  for (const char *p : k.paths) reqs.push_back({p, bytes, nullptr, nullptr, 0});
  maru_create_batch(m, reqs.data(), n, nullptr);
  std::vector<maru_chunk_t *> chunks;
  for (auto &r : reqs)
    if (r.chunk) chunks.push_back(r.chunk);
  std::vector<int> results(n);
  maru_seal_batch(chunks.data(), chunks.size(), results.data());
  for (maru_chunk_t *c : chunks) maru_release(c);
  double exists1 = PerKey(rounds, n, [&] {
    for (const char *p : k.paths) {
      size_t count = 0;
      if (maru_count_prefix(m, &p, 1, &count) || count != 1) return false;
    }
    return true;
  });
  double existsN = PerKey(rounds, n, [&] {
    size_t count = 0;
    return maru_count_prefix(m, k.paths.data(), n, &count) == 0 && count == n;
  });
  maru_unlink_batch(m, k.paths.data(), n, results.data());
  maru_disconnect(m);
  if (exists1 < 0 || existsN < 0) return Fail("counting failed");
  printf("%zu keys of %ld bytes, microseconds per key (median of %ld batches)\n", n,
         static_cast<long>(size), static_cast<long>(rounds));
  printf("  store (create+seal+unlink): one by one %8.1f  batched %8.1f  ratio %5.1fx\n", store1,
         storeN, store1 / storeN);
  printf("  exists (count_prefix):      one by one %8.1f  batched %8.1f  ratio %5.1fx\n", exists1,
         existsN, exists1 / existsN);
  if (bench.json())
    printf("{\"keys\":%zu,\"store_us_per_key\":[%.2f,%.2f],\"exists_us_per_key\":[%.2f,%.2f]}\n", n,
           store1, storeN, exists1, existsN);
  return 0;
}

}  // namespace maru::bench
