// maru-bench chunks: store and load throughput of whole chunks, next to a
// plain memcpy of the same size measured in the same run.
#include <cinttypes>

#include "bench/common.h"
#include "bench/server_bench.h"
#include "common/json_output.h"
#include "util/flags.h"
#include "util/units.h"

namespace maru::bench {
namespace {

struct Samples {
  std::vector<double> memcpy_heap, fill_pool, read_pool, store, load;
};

double GBps(uint64_t bytes, double ns) {
  return static_cast<double>(bytes) / ns;
}

}  // namespace

int RunChunks(int argc, char **argv) {
  ServerBench bench("maru-bench chunks [--server ADDRESS] [--size SIZE] [--iterations N] [--json]",
                    "Store (create + fill + seal + release) and load (open + copy out + release)\n"
                    "throughput of chunks, as ratios to memcpy of the same size in the same run.");
  uint64_t size = 32ull << 20;
  int64_t iterations = 40;
  bench.flags().Size("size", &size, "chunk size (Llama-3.1-8B, 256 tokens: 32M)");
  bench.flags().Int("iterations", &iterations, "chunks stored and loaded");
  bench.TakeDir("/maru-bench/chunks");
  if (int rc = bench.Parse(argc, argv); rc >= 0) return rc;
  if (size == 0 || iterations <= 0) return Fail("--size and --iterations must be positive");

  maru_t *m = Connect(bench.server());
  if (!m) return 1;
  std::vector<uint8_t> src = TouchedBuffer(size, 1), dst = TouchedBuffer(size, 2);
  Samples s_;
  for (int64_t i = -2; i < iterations; ++i) {  // two warm-up rounds
    const std::string path = bench.dir() + "/c" + std::to_string(i + 2);
    int64_t t0 = MonotonicNs();
    memcpy(dst.data(), src.data(), size);
    int64_t t1 = MonotonicNs();

    maru_chunk_t *c;
    int64_t t2 = MonotonicNs();
    if (int rc = maru_create(m, path.c_str(), size, &c))
      return Fail("create " + path + ": " + maru_strerror(rc));
    int64_t t3 = MonotonicNs();
    memcpy(maru_chunk_data(c), src.data(), size);
    int64_t t4 = MonotonicNs();
    if (int rc = maru_seal(c)) return Fail("seal " + path + ": " + maru_strerror(rc));
    maru_release(c);
    int64_t t5 = MonotonicNs();

    if (int rc = maru_open(m, path.c_str(), &c))
      return Fail("open " + path + ": " + maru_strerror(rc));
    int64_t t6 = MonotonicNs();
    memcpy(dst.data(), maru_chunk_data(c), size);
    int64_t t7 = MonotonicNs();
    maru_release(c);
    int64_t t8 = MonotonicNs();
    maru_unlink(m, path.c_str());
    if (i < 0) continue;
    s_.memcpy_heap.push_back(GBps(size, static_cast<double>(t1 - t0)));
    s_.fill_pool.push_back(GBps(size, static_cast<double>(t4 - t3)));
    s_.read_pool.push_back(GBps(size, static_cast<double>(t7 - t6)));
    s_.store.push_back(GBps(size, static_cast<double>(t5 - t2)));
    s_.load.push_back(GBps(size, static_cast<double>(t8 - t5)));
  }
  maru_disconnect(m);

  const double memcpy_gbps = Quantile(s_.memcpy_heap, 0.5), fill = Quantile(s_.fill_pool, 0.5),
               read = Quantile(s_.read_pool, 0.5), store = Quantile(s_.store, 0.5),
               load = Quantile(s_.load, 0.5);
  printf("chunk size %s, %" PRId64 " chunks; medians in GB/s\n", FormatSize(size).c_str(),
         iterations);
  printf("  memcpy heap->heap        %6.2f\n", memcpy_gbps);
  printf("  memcpy heap->pool        %6.2f  (%.2fx memcpy)\n", fill, fill / memcpy_gbps);
  printf("  memcpy pool->heap        %6.2f  (%.2fx memcpy)\n", read, read / memcpy_gbps);
  printf("  store (create+fill+seal) %6.2f  (%.2fx memcpy, %.2fx memcpy into pool memory)\n", store,
         store / memcpy_gbps, store / fill);
  printf("  load (open+copy out)     %6.2f  (%.2fx memcpy, %.2fx memcpy out of pool memory)\n",
         load, load / memcpy_gbps, load / read);
  if (bench.json())
    PrintJson({{"chunk_bytes", size},
               {"memcpy_gbps", Rounded(memcpy_gbps, 3)},
               {"store_gbps", Rounded(store, 3)},
               {"load_gbps", Rounded(load, 3)},
               {"store_vs_memcpy", Rounded(store / memcpy_gbps, 3)},
               {"load_vs_memcpy", Rounded(load / memcpy_gbps, 3)},
               {"store_vs_pool_memcpy", Rounded(store / fill, 3)},
               {"load_vs_pool_memcpy", Rounded(load / read, 3)}});
  return 0;
}

}  // namespace maru::bench
