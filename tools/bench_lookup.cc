// maru-bench lookup: latency of one batched prefix lookup of many keys.
#include <atomic>
#include <thread>

#include "bench_common.h"
#include "json_output.h"
#include "util/flags.h"

namespace maru::bench {

int RunLookup(int argc, char **argv) {
  std::string server = "unix:///run/maru/maru.sock", dir = "/maru-bench/lookup",
              thread_list = "1,4";
  int64_t keys = 128, seconds = 3;
  bool json = false;
  Flags flags("maru-bench lookup [--server ADDRESS] [--keys N] [--threads 1,4] [--json]",
              "p50/p99 latency of a batched prefix lookup (all hits) of N keys, then release.");
  flags.String("server", &server, "maru-server address");
  flags.Int("keys", &keys, "keys per lookup");
  flags.String("threads", &thread_list, "comma-separated thread counts to run");
  flags.Int("seconds", &seconds, "duration of each run");
  flags.String("dir", &dir, "directory for the benchmark's chunks");
  flags.Bool("json", &json, "end with one JSON line of the figures");
  if (int rc = ParseFlags(flags, argc, argv); rc >= 0) return rc;
  if (keys <= 0 || seconds <= 0) return Fail("--keys and --seconds must be positive");

  maru_t *m;
  if (int rc = maru_connect(server.c_str(), &m))
    return Fail("connect: " + std::string(maru_strerror(rc)));
  std::vector<std::string> names;
  for (int64_t i = 0; i < keys; ++i) {
    names.push_back(dir + "/block" + std::to_string(i));
    maru_chunk_t *c;
    int rc = maru_create(m, names.back().c_str(), 4096, &c);
    if (rc == -EEXIST) continue;
    if (rc) return Fail("create: " + std::string(maru_strerror(rc)));
    memset(maru_chunk_data(c), 1, 4096);
    maru_seal(c);
    maru_release(c);
  }
  std::vector<const char *> paths;
  for (auto &n : names) paths.push_back(n.c_str());

  Json runs = Json::array();
  printf("batched prefix lookup of %ld keys (latency in microseconds)\n", static_cast<long>(keys));
  size_t pos = 0;
  while (pos < thread_list.size()) {
    size_t comma = thread_list.find(',', pos);
    int threads = atoi(thread_list.substr(pos, comma - pos).c_str());
    pos = comma == std::string::npos ? thread_list.size() : comma + 1;
    if (threads <= 0) return Fail("bad --threads");
    std::vector<std::vector<double>> lat(static_cast<size_t>(threads));
    std::atomic<bool> failed{false};
    const int64_t end = MonotonicNs() + seconds * 1000000000;
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        std::vector<maru_chunk_t *> out(paths.size());
        while (MonotonicNs() < end) {
          size_t hits = 0;
          int64_t t0 = MonotonicNs();
          int rc = maru_lookup_prefix(m, paths.data(), paths.size(), out.data(), &hits);
          int64_t t1 = MonotonicNs();
          if (rc || hits != paths.size()) failed = true;
          for (size_t i = 0; i < hits; ++i) maru_release(out[i]);
          lat[static_cast<size_t>(t)].push_back(static_cast<double>(t1 - t0) / 1000.0);
        }
      });
    }
    for (auto &w : workers) w.join();
    if (failed) return Fail("a lookup did not find every key");
    std::vector<double> all;
    for (auto &l : lat) all.insert(all.end(), l.begin(), l.end());
    double p50 = Quantile(all, 0.5), p99 = Quantile(all, 0.99);
    double rate = static_cast<double>(all.size()) / static_cast<double>(seconds);
    printf("  %d thread%s: p50 %7.1f  p99 %7.1f  (%.0f lookups/s)\n", threads,
           threads > 1 ? "s" : " ", p50, p99, rate);
    runs.push_back({{"threads", threads},
                    {"p50_us", Rounded(p50, 1)},
                    {"p99_us", Rounded(p99, 1)},
                    {"lookups_per_s", Rounded(rate, 0)}});
  }
  maru_disconnect(m);
  if (json) PrintJson({{"keys", keys}, {"runs", runs}});
  return 0;
}

}  // namespace maru::bench
