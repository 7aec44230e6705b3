// maru-bench ops: one open + release of one chunk, through the shared-memory
// index and by message, side by side, in threads of one process and in
// separate processes (each a copy of maru-bench in worker mode).
#include <unistd.h>

#include <climits>
#include <cstdio>

#include "bench_common.h"
#include "bench_paths.h"
#include "json_output.h"
#include "util/flags.h"

namespace maru::bench {
namespace {

// Worker mode: one process's run, printed as "ops p50 p99".
int RunWorker(const std::string &server, const std::string &path, bool index, int64_t seconds) {
  int err = 0;
  maru_t *m = ConnectPath(server, index, &err);
  if (!m) return Fail("connect: " + std::string(maru_strerror(err)));
  PathRun r = TimeThreads(1, seconds, [&] {
    const int64_t t0 = MonotonicNs();
    maru_chunk_t *c;
    if (maru_open(m, path.c_str(), &c)) return -1.0;
    maru_release(c);
    return UsSince(t0);
  });
  maru_disconnect(m);
  if (r.failed) return Fail("an open failed");
  printf("%.0f %.2f %.2f\n", r.per_s * static_cast<double>(seconds), r.p50_us, r.p99_us);
  return 0;
}

// `n` worker processes at once: the sum of their rates, the median of their p50s.
PathRun RunProcesses(int n, const std::string &server, const std::string &path, bool index,
                     int64_t seconds) {
  char self[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  PathRun total;
  if (len <= 0) return total.failed = true, total;
  self[len] = 0;
  const std::string cmd = std::string("exec ") + self + " ops --worker " +
                          (index ? "index" : "message") + " --server " + server + " --path " +
                          path + " --seconds " + std::to_string(seconds);
  std::vector<FILE *> procs;
  for (int i = 0; i < n; ++i) procs.push_back(popen(cmd.c_str(), "r"));
  std::vector<double> p50s, p99s;
  for (FILE *f : procs) {
    double ops = 0, p50 = 0, p99 = 0;
    if (!f || fscanf(f, "%lf %lf %lf", &ops, &p50, &p99) != 3) total.failed = true;
    if (f && pclose(f) != 0) total.failed = true;
    total.per_s += ops / static_cast<double>(seconds);
    p50s.push_back(p50);
    p99s.push_back(p99);
  }
  total.p50_us = Quantile(p50s, 0.5);
  total.p99_us = Quantile(p99s, 0.5);
  return total;
}

}  // namespace

int RunOps(int argc, char **argv) {
  std::string server = "unix:///run/maru/maru.sock", path = "/maru-bench/ops/one",
              thread_list = "1,4", process_list = "1,4", worker;
  int64_t seconds = 2;
  bool json = false;
  Flags flags("maru-bench ops [--server ADDRESS] [--threads 1,4] [--processes 1,4] [--json]",
              "p50/p99 latency and rate of one open + release of one chunk, through the\n"
              "shared-memory index and by message, side by side.");
  flags.String("server", &server, "maru-server address");
  flags.String("threads", &thread_list, "comma-separated thread counts (one process)");
  flags.String("processes", &process_list, "comma-separated process counts (one thread each)");
  flags.Int("seconds", &seconds, "duration of each run");
  flags.String("path", &path, "the chunk opened (made if missing)");
  flags.String("worker", &worker, "(internal) run one worker process: index or message");
  flags.Bool("json", &json, "end with one JSON line of the figures");
  if (int rc = ParseFlags(flags, argc, argv); rc >= 0) return rc;
  if (seconds <= 0) return Fail("--seconds must be positive");
  if (!worker.empty()) return RunWorker(server, path, worker == "index", seconds);

  maru_t *m;
  if (int rc = maru_connect(server.c_str(), &m))
    return Fail("connect: " + std::string(maru_strerror(rc)));
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
  auto open_release = [&](maru_t *h) {
    return [&, h] {
      const int64_t t0 = MonotonicNs();
      maru_chunk_t *one;
      if (maru_open(h, path.c_str(), &one)) return -1.0;
      maru_release(one);
      return UsSince(t0);
    };
  };
  const std::vector<int> threads = CountList(thread_list), procs = CountList(process_list);
  if (threads.empty() || procs.empty()) return Fail("bad --threads or --processes");
  Json runs = Json::array();
  printf("open + release of one chunk (latency in microseconds)\n");
  printf("  %-12s | index p50    p99      ops/s | message p50    p99      ops/s | p50 ratio\n", "");
  auto report = [&](const char *kind, int n, const PathRun &ix, const PathRun &msg) {
    printf("  %3d %-8s | %9.2f %6.1f %10.0f | %11.1f %6.1f %10.0f | %5.1fx\n", n, kind, ix.p50_us,
           ix.p99_us, ix.per_s, msg.p50_us, msg.p99_us, msg.per_s, msg.p50_us / ix.p50_us);
    runs.push_back({{kind, n},
                    {"index_p50_us", Rounded(ix.p50_us, 2)},
                    {"index_p99_us", Rounded(ix.p99_us, 2)},
                    {"index_ops_per_s", Rounded(ix.per_s, 0)},
                    {"message_p50_us", Rounded(msg.p50_us, 2)},
                    {"message_p99_us", Rounded(msg.p99_us, 2)},
                    {"message_ops_per_s", Rounded(msg.per_s, 0)}});
  };
  for (int n : threads) {
    PathRun ix = TimeThreads(n, seconds, open_release(m));
    PathRun msg = TimeThreads(n, seconds, open_release(by_message));
    if (ix.failed || msg.failed) return Fail("an open failed");
    report("threads", n, ix, msg);
  }
  maru_disconnect(by_message);
  maru_disconnect(m);
  for (int n : procs) {
    PathRun ix = RunProcesses(n, server, path, true, seconds);
    PathRun msg = RunProcesses(n, server, path, false, seconds);
    if (ix.failed || msg.failed) return Fail("a worker process failed");
    report("processes", n, ix, msg);
  }
  if (json) PrintJson({{"runs", runs}});
  return 0;
}

}  // namespace maru::bench
