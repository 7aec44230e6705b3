// maru-bench quota: what a quota costs a store. Small chunks are created
// and sealed in two directories in turn, one under a quota and one not,
// so both sides see the same server, load and pool in the same run.
#include <unistd.h>

#include <cinttypes>
#include <cstdlib>

#include "bench/common.h"
#include "bench/server_bench.h"
#include "common/json_output.h"
#include "util/flags.h"
#include "util/units.h"

namespace maru::bench {
namespace {

// Sets (bytes > 0) or removes the quota on `dir` with the maructl built
// beside this binary (or on PATH): libmaru_direct does not set quotas, and
// a second copy of the RPC client in this binary would clash with its own.
int SetQuota(const std::string &server, const std::string &dir, uint64_t bytes) {
  std::string ctl = "maructl";
  char self[4096];
  if (ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1); n > 0) {
    std::string beside(self, static_cast<size_t>(n));
    beside = beside.substr(0, beside.rfind('/') + 1) + "maructl";
    if (access(beside.c_str(), X_OK) == 0) ctl = beside;
  }
  const std::string cmd = "'" + ctl + "' quota set '" + dir + "' " +
                          (bytes ? std::to_string(bytes) : "none") + " --server '" + server + "'";
  return system(cmd.c_str()) == 0 ? 0 : Fail("maructl quota set failed (root only)");
}

// Create + fill + seal + release of one chunk, in microseconds; -1 on error.
double StoreUs(maru_t *m, const std::string &path, const std::vector<uint8_t> &src) {
  maru_chunk_t *c;
  const int64_t t0 = MonotonicNs();
  if (maru_create(m, path.c_str(), src.size(), &c)) return -1;
  memcpy(maru_chunk_data(c), src.data(), src.size());
  const int rc = maru_seal(c);
  maru_release(c);
  const int64_t t1 = MonotonicNs();
  return rc ? -1 : static_cast<double>(t1 - t0) / 1e3;
}

}  // namespace

int RunQuota(int argc, char **argv) {
  ServerBench bench(
      "maru-bench quota [--server ADDRESS] [--size SIZE] [--iterations N] [--json]",
      "Latency of a store (create + fill + seal) of a small chunk in a directory with\n"
      "a quota and in one without, in turn in one run, and their ratio. Needs root.");
  uint64_t size = 64u << 10;
  int64_t iterations = 2000;
  bench.flags().Size("size", &size, "chunk size");
  bench.flags().Int("iterations", &iterations, "chunks stored on each side");
  bench.TakeDir("/maru-bench/quota");
  if (int rc = bench.Parse(argc, argv); rc >= 0) return rc;
  const std::string &server = bench.server(), &dir = bench.dir();
  if (size == 0 || iterations <= 0) return Fail("--size and --iterations must be positive");

  maru_t *m = Connect(server);
  if (!m) return 1;
  const std::string with = dir + "/with", without = dir + "/without";
  std::vector<uint8_t> src = TouchedBuffer(size, 1);
  // The directories exist before the quota is set on one of them.
  if (StoreUs(m, with + "/seed", src) < 0 || StoreUs(m, without + "/seed", src) < 0)
    return Fail("cannot store under " + dir);
  if (int rc = SetQuota(server, with, 1ull << 50)) return rc;
  std::vector<double> on, off;
  for (int64_t i = -20; i < iterations; ++i) {  // warm-up rounds first
    const std::string name = "/c" + std::to_string(i + 20);
    // Each side goes first every other round: the first store of a round
    // may find colder caches than the second.
    double a, b;
    if (i % 2) {
      a = StoreUs(m, with + name, src);
      b = StoreUs(m, without + name, src);
    } else {
      b = StoreUs(m, without + name, src);
      a = StoreUs(m, with + name, src);
    }
    maru_unlink(m, (with + name).c_str());
    maru_unlink(m, (without + name).c_str());
    if (a < 0 || b < 0) return Fail("store " + name + " failed");
    if (i < 0) continue;
    on.push_back(a);
    off.push_back(b);
  }
  maru_unlink(m, (with + "/seed").c_str());
  maru_unlink(m, (without + "/seed").c_str());
  maru_disconnect(m);
  if (int rc = SetQuota(server, with, 0)) return rc;

  const double p50_on = Quantile(on, 0.5), p50_off = Quantile(off, 0.5);
  const double p99_on = Quantile(on, 0.99), p99_off = Quantile(off, 0.99);
  printf("store of %s, %" PRId64 " chunks each side; microseconds\n", FormatSize(size).c_str(),
         iterations);
  printf("  without a quota   p50 %8.1f  p99 %8.1f\n", p50_off, p99_off);
  printf("  under a quota     p50 %8.1f  p99 %8.1f\n", p50_on, p99_on);
  printf("  ratio (quota / none)  p50 %.3f  p99 %.3f\n", p50_on / p50_off, p99_on / p99_off);
  if (bench.json())
    PrintJson({{"chunk_bytes", size},
               {"p50_us_without", Rounded(p50_off, 1)},
               {"p50_us_with", Rounded(p50_on, 1)},
               {"p50_ratio", Rounded(p50_on / p50_off, 3)},
               {"p99_ratio", Rounded(p99_on / p99_off, 3)}});
  return 0;
}

}  // namespace maru::bench
