// maru-bench lookup: one batched prefix lookup of many keys, through the
// shared-memory index and by message, side by side, in threads of one
// process and in separate processes (each a copy of maru-bench in worker mode).
#include "bench/common.h"
#include "bench/paths.h"
#include "bench/server_bench.h"
#include "common/json_output.h"
#include "util/flags.h"

namespace maru::bench {
namespace {

std::vector<std::string> KeyNames(const std::string &dir, int64_t keys) {
  std::vector<std::string> names;
  for (int64_t i = 0; i < keys; ++i) names.push_back(dir + "/block" + std::to_string(i));
  return names;
}

// One lookup of all of `paths` on `m`, timed; the releases are not timed.
std::function<double()> LookupAll(maru_t *m, const std::vector<const char *> &paths) {
  return [m, &paths] {
    thread_local std::vector<maru_chunk_t *> out;
    out.resize(paths.size());
    size_t hits = 0;
    const int64_t t0 = MonotonicNs();
    int rc = maru_lookup_prefix(m, paths.data(), paths.size(), out.data(), &hits);
    const double us = UsSince(t0);
    maru_release_batch(out.data(), hits, nullptr);
    return rc == 0 && hits == paths.size() ? us : -1.0;
  };
}

// Releases of a lookup's chunks, one maru_release() each against one
// maru_release_batch(), taking turns (the lookups untimed): p50s in µs.
struct ReleaseTimes {
  double each_us = 0, batch_us = 0;
  bool failed = false;
};
ReleaseTimes TimeReleases(maru_t *m, const std::vector<const char *> &paths, int64_t seconds) {
  std::vector<maru_chunk_t *> out(paths.size());
  std::vector<double> each, batch;
  const int64_t end = MonotonicNs() + seconds * 1000000000;
  ReleaseTimes r;
  for (bool one_by_one = true; MonotonicNs() < end; one_by_one = !one_by_one) {
    size_t hits = 0;
    const int rc = maru_lookup_prefix(m, paths.data(), paths.size(), out.data(), &hits);
    if (rc != 0 || hits != paths.size()) r.failed = true;
    const int64_t t0 = MonotonicNs();
    if (one_by_one) {
      for (size_t i = 0; i < hits; ++i) maru_release(out[i]);
    } else {
      maru_release_batch(out.data(), hits, nullptr);
    }
    (one_by_one ? each : batch).push_back(UsSince(t0));
  }
  r.each_us = Quantile(each, 0.5);
  r.batch_us = Quantile(batch, 0.5);
  return r;
}

// Worker mode: one process's run of one thread, printed for the parent.
int RunWorker(const std::string &server, const std::vector<const char *> &paths, bool index,
              int64_t seconds, int64_t start_ns) {
  int err = 0;
  maru_t *m = ConnectPath(server, index, &err);
  if (!m) return Fail("connect: " + std::string(maru_strerror(err)));
  WaitForStart(start_ns);
  PathRun r = TimeThreads(1, seconds, LookupAll(m, paths));
  maru_disconnect(m);
  if (r.failed) return Fail("a lookup did not find every key");
  PrintWorkerRun(r, seconds);
  return 0;
}

}  // namespace

int RunLookup(int argc, char **argv) {
  ServerBench bench(
      "maru-bench lookup [--server ADDRESS] [--keys N] [--threads 1,2,4] [--processes 1,2,4] "
      "[--json]",
      "p50/p99 latency and rate of a batched prefix lookup (all hits) of N keys, then\n"
      "release: through the shared-memory index and by message, side by side. Rates are\n"
      "summed over the threads or processes; x1st is the rate over the first row's; cores\n"
      "is the CPU time the clients got per second (below the thread count: the host was\n"
      "busy).");
  std::string thread_list = "1,2,4", process_list = "1,2,4", worker;
  int64_t keys = 128, seconds = 3, start_ns = 0;
  Flags &flags = bench.flags();
  flags.Int("keys", &keys, "keys per lookup");
  flags.String("threads", &thread_list, "comma-separated thread counts (one process)");
  flags.String("processes", &process_list,
               "comma-separated process counts (one thread each; 0: none)");
  flags.Int("seconds", &seconds, "duration of each run");
  flags.String("worker", &worker, "(internal) run one worker process: index or message");
  flags.Int("start-ns", &start_ns, "(internal) when a worker starts, on the monotonic clock");
  bench.TakeDir("/maru-bench/lookup");
  if (int rc = bench.Parse(argc, argv); rc >= 0) return rc;
  const std::string &server = bench.server(), &dir = bench.dir();
  if (keys <= 0 || seconds <= 0) return Fail("--keys and --seconds must be positive");
  const std::vector<std::string> names = KeyNames(dir, keys);
  std::vector<const char *> paths;
  for (auto &n : names) paths.push_back(n.c_str());
  if (!worker.empty()) return RunWorker(server, paths, worker == "index", seconds, start_ns);

  maru_t *m = Connect(server);
  if (!m) return 1;
  for (const std::string &name : names) {
    maru_chunk_t *c;
    int rc = maru_create(m, name.c_str(), 4096, &c);
    if (rc == -EEXIST) continue;
    if (rc) return Fail("create: " + std::string(maru_strerror(rc)));
    memset(maru_chunk_data(c), 1, 4096);
    maru_seal(c);
    maru_release(c);
  }
  int err = 0;
  maru_t *by_message = ConnectPath(server, false, &err);
  if (!by_message) return Fail("connect: " + std::string(maru_strerror(err)));
  const std::vector<int> threads = CountList(thread_list);
  const std::vector<int> procs = process_list == "0" ? std::vector<int>{} : CountList(process_list);
  if (threads.empty() || (procs.empty() && process_list != "0"))
    return Fail("bad --threads or --processes");
  Json runs = Json::array();
  SideBySide table("look/s");
  printf(
      "batched prefix lookup of %ld keys, released untimed in one maru_release_batch() "
      "(latency in microseconds)\n",
      static_cast<long>(keys));
  table.Header();
  for (int n : threads) {
    PathRun ix = TimeThreads(n, seconds, LookupAll(m, paths));
    PathRun msg = TimeThreads(n, seconds, LookupAll(by_message, paths));
    if (ix.failed || msg.failed) return Fail("a lookup did not find every key");
    runs.push_back(table.Row("threads", n, ix, msg));
  }
  printf("\nrelease of the %ld chunks a lookup leased, one thread (p50, microseconds)\n\n",
         static_cast<long>(keys));
  printf("| path | maru_release each | maru_release_batch | batch/each |\n|---|---|---|---|\n");
  Json releases = Json::object();
  for (auto [name, on] : {std::pair{"index", m}, std::pair{"message", by_message}}) {
    const ReleaseTimes r = TimeReleases(on, paths, seconds);
    if (r.failed) return Fail("a lookup did not find every key");
    printf("| %s | %.2f | %.2f | %.2f× |\n", name, r.each_us, r.batch_us,
           r.each_us > 0 ? r.batch_us / r.each_us : 0);
    releases[name] = {{"each_p50_us", Rounded(r.each_us, 3)},
                      {"batch_p50_us", Rounded(r.batch_us, 3)}};
  }
  maru_disconnect(by_message);
  maru_disconnect(m);
  const std::string args =
      "lookup --server " + server + " --dir " + dir + " --keys " + std::to_string(keys);
  for (int n : procs) {
    PathRun ix = RunWorkerProcesses(n, args, true, seconds);
    PathRun msg = RunWorkerProcesses(n, args, false, seconds);
    if (ix.failed || msg.failed) return Fail("a worker process failed");
    runs.push_back(table.Row("processes", n, ix, msg));
  }
  if (bench.json()) PrintJson({{"keys", keys}, {"runs", runs}, {"release", releases}});
  return 0;
}

}  // namespace maru::bench
