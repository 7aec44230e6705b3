// maru-bench lookup: latency of one batched prefix lookup of many keys.
#include "bench_common.h"
#include "bench_paths.h"
#include "json_output.h"
#include "util/flags.h"

namespace maru::bench {

int RunLookup(int argc, char **argv) {
  std::string server = "unix:///run/maru/maru.sock", dir = "/maru-bench/lookup",
              thread_list = "1,4";
  int64_t keys = 128, seconds = 3;
  bool json = false;
  Flags flags("maru-bench lookup [--server ADDRESS] [--keys N] [--threads 1,4] [--json]",
              "p50/p99 latency of a batched prefix lookup (all hits) of N keys, then release:\n"
              "through the shared-memory index and by message, side by side.");
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

  // The same lookups through the shared-memory index and by message.
  int err = 0;
  maru_t *by_message = ConnectPath(server, false, &err);
  if (!by_message) return Fail("connect: " + std::string(maru_strerror(err)));
  auto lookup = [&](maru_t *h) {
    return [&, h] {
      thread_local std::vector<maru_chunk_t *> out;
      out.resize(paths.size());
      size_t hits = 0;
      const int64_t t0 = MonotonicNs();
      int rc = maru_lookup_prefix(h, paths.data(), paths.size(), out.data(), &hits);
      const double us = UsSince(t0);  // the lookup; the releases are not timed
      for (size_t i = 0; i < hits; ++i) maru_release(out[i]);
      return rc == 0 && hits == paths.size() ? us : -1.0;
    };
  };
  const std::vector<int> counts = CountList(thread_list);
  if (counts.empty()) return Fail("bad --threads");
  Json runs = Json::array(), by_message_runs = Json::array();
  printf("batched prefix lookup of %ld keys, released untimed (latency in microseconds)\n",
         static_cast<long>(keys));
  printf("  threads | index p50    p99  lookups/s | message p50    p99  lookups/s | p50 ratio\n");
  for (int threads : counts) {
    PathRun ix = TimeThreads(threads, seconds, lookup(m));
    PathRun msg = TimeThreads(threads, seconds, lookup(by_message));
    if (ix.failed || msg.failed) return Fail("a lookup did not find every key");
    printf("  %7d | %9.1f %6.1f %10.0f | %11.1f %6.1f %10.0f | %5.1fx\n", threads, ix.p50_us,
           ix.p99_us, ix.per_s, msg.p50_us, msg.p99_us, msg.per_s, msg.p50_us / ix.p50_us);
    runs.push_back({{"threads", threads},
                    {"p50_us", Rounded(ix.p50_us, 1)},
                    {"p99_us", Rounded(ix.p99_us, 1)},
                    {"lookups_per_s", Rounded(ix.per_s, 0)}});
    by_message_runs.push_back({{"threads", threads},
                               {"p50_us", Rounded(msg.p50_us, 1)},
                               {"p99_us", Rounded(msg.p99_us, 1)},
                               {"lookups_per_s", Rounded(msg.per_s, 0)}});
  }
  maru_disconnect(by_message);
  maru_disconnect(m);
  // "runs": the default path (the index where the server has one).
  if (json) PrintJson({{"keys", keys}, {"runs", runs}, {"runs_by_message", by_message_runs}});
  return 0;
}

}  // namespace maru::bench
