// Shared by maru-bench lookup and ops: the same operation timed through the
// shared-memory index and by message, side by side in one run, in threads of
// one process and in separate processes (copies of maru-bench in worker mode).
#pragma once

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "bench/common.h"
#include "common/json_output.h"

namespace maru::bench {

// A connection that uses the index (`index` true) or only messages
// (MARU_INDEX=0 while it connects); null on failure, with `error` set.
inline maru_t *ConnectPath(const std::string &server, bool index, int *error) {
  if (!index) setenv("MARU_INDEX", "0", 1);
  maru_t *m = nullptr;
  *error = maru_connect(server.c_str(), &m);
  if (!index) unsetenv("MARU_INDEX");
  return *error ? nullptr : m;
}

// Microseconds since `t0` (MonotonicNs).
inline double UsSince(int64_t t0) {
  return static_cast<double>(MonotonicNs() - t0) / 1000.0;
}

inline double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

struct PathRun {
  double p50_us = 0, p99_us = 0, per_s = 0;
  // CPU time the client's threads got, per second of the run: 2 threads
  // that had two cores to themselves show 2.0. Below the thread count, the
  // run measured the queue for the CPU (other work on the host), not Maru.
  double cores = 0;
  bool failed = false;
};

// Runs `op` in `threads` threads for `seconds`. `op` returns the latency it
// measured in microseconds (what it times is its choice), negative if it failed.
inline PathRun TimeThreads(int threads, int64_t seconds, const std::function<double()> &op) {
  std::vector<std::vector<double>> lat(static_cast<size_t>(threads));
  std::vector<double> cpu(static_cast<size_t>(threads));
  std::atomic<bool> failed{false};
  const int64_t end = MonotonicNs() + seconds * 1000000000;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      // The thread's own vector, handed over at the end: vectors side by
      // side in `lat` share a cache line, and every push_back writes it.
      std::vector<double> mine;
      mine.reserve(1 << 20);
      const double cpu0 = ThreadCpuSeconds();
      while (MonotonicNs() < end) {
        const double us = op();
        if (us < 0) failed = true;
        mine.push_back(us);
      }
      cpu[static_cast<size_t>(t)] = ThreadCpuSeconds() - cpu0;
      lat[static_cast<size_t>(t)] = std::move(mine);
    });
  for (auto &w : workers) w.join();
  std::vector<double> all;
  for (auto &l : lat) all.insert(all.end(), l.begin(), l.end());
  PathRun r;
  r.failed = failed;
  r.p50_us = Quantile(all, 0.5);
  r.p99_us = Quantile(all, 0.99);
  r.per_s = static_cast<double>(all.size()) / static_cast<double>(seconds);
  for (double c : cpu) r.cores += c / static_cast<double>(seconds);
  return r;
}

// Worker mode's start: every worker of a run connects first, then starts
// timing at the same instant (`start_ns` on the monotonic clock, which all
// processes share), so that their runs overlap.
inline void WaitForStart(int64_t start_ns) {
  timespec ts{static_cast<time_t>(start_ns / 1000000000), static_cast<long>(start_ns % 1000000000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

// Worker mode's answer, one line: "ops cpu_seconds p50 p99".
inline void PrintWorkerRun(const PathRun &r, int64_t seconds) {
  printf("%.0f %.4f %.3f %.3f\n", r.per_s * static_cast<double>(seconds),
         r.cores * static_cast<double>(seconds), r.p50_us, r.p99_us);
}

// `n` copies of this program at once, each `maru-bench ARGS --worker PATH
// --start-ns T` (PATH: index or message): the sum of their rates and of their
// cores, the median of their p50s and p99s.
inline PathRun RunWorkerProcesses(int n, const std::string &args, bool index, int64_t seconds) {
  char self[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  PathRun total;
  if (len <= 0) return total.failed = true, total;
  self[len] = 0;
  // Time for every worker to connect and map the pool before the start.
  const int64_t start = MonotonicNs() + 500000000 + 250000000LL * n;
  const std::string cmd = std::string("exec ") + self + " " + args + " --seconds " +
                          std::to_string(seconds) + " --worker " + (index ? "index" : "message") +
                          " --start-ns " + std::to_string(start);
  std::vector<FILE *> procs;
  for (int i = 0; i < n; ++i) procs.push_back(popen(cmd.c_str(), "r"));
  std::vector<double> p50s, p99s;
  for (FILE *f : procs) {
    double ops = 0, cpu = 0, p50 = 0, p99 = 0;
    if (!f || fscanf(f, "%lf %lf %lf %lf", &ops, &cpu, &p50, &p99) != 4) total.failed = true;
    if (f && pclose(f) != 0) total.failed = true;
    total.per_s += ops / static_cast<double>(seconds);
    total.cores += cpu / static_cast<double>(seconds);
    p50s.push_back(p50);
    p99s.push_back(p99);
  }
  total.p50_us = Quantile(p50s, 0.5);
  total.p99_us = Quantile(p99s, 0.5);
  return total;
}

// "1,4,8" -> {1, 4, 8}; empty on a bad list.
inline std::vector<int> CountList(const std::string &list) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos < list.size()) {
    size_t comma = list.find(',', pos);
    int n = atoi(list.substr(pos, comma - pos).c_str());
    if (n <= 0) return {};
    out.push_back(n);
    pos = comma == std::string::npos ? list.size() : comma + 1;
  }
  return out;
}

// The rows of `maru-bench lookup` and `ops`: one operation through the index
// and by message at 1, 2, 4 ... threads or processes, with rates summed over
// them, how they grow from the first row, and the ratios of the two paths.
class SideBySide {
 public:
  explicit SideBySide(const char *unit) : unit_(unit) {}
  void Header() const {
    printf(
        "  %-13s| index p50    p99      %-6s x1st cores | message p50    p99    %-6s x1st cores"
        " | ratio %s  p50\n",
        "", unit_, unit_, unit_);
  }
  // One row; `kind` is "threads" or "processes".
  Json Row(const char *kind, int n, const PathRun &ix, const PathRun &msg) {
    if (first_kind_ != kind) first_kind_ = kind, first_ix_ = ix.per_s, first_msg_ = msg.per_s;
    const double ix_x = ix.per_s / first_ix_, msg_x = msg.per_s / first_msg_;
    printf(
        "  %3d %-9s| %9.2f %6.1f %10.0f %4.2f %5.2f | %11.1f %6.1f %8.0f %4.2f %5.2f | %9.1fx "
        "%5.1fx\n",
        n, kind, ix.p50_us, ix.p99_us, ix.per_s, ix_x, ix.cores, msg.p50_us, msg.p99_us, msg.per_s,
        msg_x, msg.cores, ix.per_s / msg.per_s, msg.p50_us / ix.p50_us);
    fflush(stdout);
    return {{kind, n},
            {"index_p50_us", Rounded(ix.p50_us, 2)},
            {"index_p99_us", Rounded(ix.p99_us, 2)},
            {"index_per_s", Rounded(ix.per_s, 0)},
            {"index_cores", Rounded(ix.cores, 2)},
            {"message_p50_us", Rounded(msg.p50_us, 2)},
            {"message_p99_us", Rounded(msg.p99_us, 2)},
            {"message_per_s", Rounded(msg.per_s, 0)},
            {"message_cores", Rounded(msg.cores, 2)}};
  }

 private:
  const char *unit_;
  std::string first_kind_;
  double first_ix_ = 0, first_msg_ = 0;
};

}  // namespace maru::bench
