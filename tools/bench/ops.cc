// maru-bench ops: one open + release of one chunk, through the shared-memory
// index and by message, side by side, in threads of one process and in
// separate processes (each a copy of maru-bench in worker mode).
#include "bench/common.h"
#include "bench/paths.h"
#include "bench/server_bench.h"
#include "common/json_output.h"
#include "util/flags.h"

namespace maru::bench {
namespace {

// One open + release of `path` on `m`, timed.
std::function<double()> OpenRelease(maru_t *m, const std::string &path) {
  return [m, &path] {
    const int64_t t0 = MonotonicNs();
    maru_chunk_t *c;
    if (maru_open(m, path.c_str(), &c)) return -1.0;
    maru_release(c);
    return UsSince(t0);
  };
}

// Worker mode: one process's run of one thread, printed for the parent.
int RunWorker(const std::string &server, const std::string &path, bool index, int64_t seconds,
              int64_t start_ns) {
  int err = 0;
  maru_t *m = ConnectPath(server, index, &err);
  if (!m) return Fail("connect: " + std::string(maru_strerror(err)));
  WaitForStart(start_ns);
  PathRun r = TimeThreads(1, seconds, OpenRelease(m, path));
  maru_disconnect(m);
  if (r.failed) return Fail("an open failed");
  PrintWorkerRun(r, seconds);
  return 0;
}

}  // namespace

int RunOps(int argc, char **argv) {
  ServerBench bench(
      "maru-bench ops [--server ADDRESS] [--threads 1,2,4] [--processes 1,2,4] [--json]",
      "p50/p99 latency and rate of one open + release of one chunk, through the\n"
      "shared-memory index and by message, side by side. Rates are summed over the\n"
      "threads or processes; x1st is the rate over the first row's; cores is the CPU\n"
      "time the clients got per second (below the thread count: the host was busy).");
  std::string path = "/maru-bench/ops/one", thread_list = "1,2,4", process_list = "1,2,4", worker;
  int64_t seconds = 2, start_ns = 0;
  Flags &flags = bench.flags();
  flags.String("threads", &thread_list, "comma-separated thread counts (one process)");
  flags.String("processes", &process_list, "comma-separated process counts (one thread each)");
  flags.Int("seconds", &seconds, "duration of each run");
  flags.String("path", &path, "the chunk opened (made if missing)");
  flags.String("worker", &worker, "(internal) run one worker process: index or message");
  flags.Int("start-ns", &start_ns, "(internal) when a worker starts, on the monotonic clock");
  if (int rc = bench.Parse(argc, argv); rc >= 0) return rc;
  const std::string &server = bench.server();
  if (seconds <= 0) return Fail("--seconds must be positive");
  if (!worker.empty()) return RunWorker(server, path, worker == "index", seconds, start_ns);

  maru_t *m = Connect(server);
  if (!m) return 1;
  maru_chunk_t *c;
  int rc = maru_create(m, path.c_str(), 4096, &c);
  if (rc == 0) {
    memset(maru_chunk_data(c), 1, 4096);
    rc = maru_seal(c);
    maru_release(c);
  }
  if (rc && rc != -EEXIST) return Fail("create: " + std::string(maru_strerror(rc)));
  int err = 0;
  maru_t *by_message = ConnectPath(server, false, &err);
  if (!by_message) return Fail("connect: " + std::string(maru_strerror(err)));
  const std::vector<int> threads = CountList(thread_list), procs = CountList(process_list);
  if (threads.empty() || procs.empty()) return Fail("bad --threads or --processes");
  Json runs = Json::array();
  SideBySide table("ops/s");
  printf("open + release of one chunk (latency in microseconds)\n");
  table.Header();
  for (int n : threads) {
    PathRun ix = TimeThreads(n, seconds, OpenRelease(m, path));
    PathRun msg = TimeThreads(n, seconds, OpenRelease(by_message, path));
    if (ix.failed || msg.failed) return Fail("an open failed");
    runs.push_back(table.Row("threads", n, ix, msg));
  }
  maru_disconnect(by_message);
  maru_disconnect(m);
  const std::string args = "ops --server " + server + " --path " + path;
  for (int n : procs) {
    PathRun ix = RunWorkerProcesses(n, args, true, seconds);
    PathRun msg = RunWorkerProcesses(n, args, false, seconds);
    if (ix.failed || msg.failed) return Fail("a worker process failed");
    runs.push_back(table.Row("processes", n, ix, msg));
  }
  if (bench.json()) PrintJson({{"runs", runs}});
  return 0;
}

}  // namespace maru::bench
