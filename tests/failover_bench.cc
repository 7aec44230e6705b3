// The gap a client sees when the leader of a pool is killed: three hosts, a
// server and an etcd member on each (HaGroup), one writer storing chunks
// one after another through the list of servers. Each round kills the
// leader with SIGKILL, waits for another to lead, and starts the killed
// one again as a standby. The gap is the time between the last seal before
// the kill and the first after it, as the writer logged them (the longest
// pause between seals around the kill).
//
//   failover_bench [ROUNDS]   (default 20; needs root, like the ha tests)
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "ha_group.h"
#include "harness.h"

namespace {

int64_t NowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000ll + t.tv_nsec;
}

// The seal times the writer logged ("PATH NS" lines).
std::vector<int64_t> Seals(const std::string &log) {
  std::ifstream in(log);
  std::vector<int64_t> out;
  for (std::string line; std::getline(in, line);)
    if (size_t sp = line.find(' '); sp != std::string::npos)
      out.push_back(strtoll(line.c_str() + sp + 1, nullptr, 10));
  return out;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char **argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 20;
  maru_test::TempDir dir;
  maru_test::HaGroup group;
  if (!group.ok() || !group.Start()) return fprintf(stderr, "the group did not start\n"), 1;
  const std::string log = dir.path() + "/stored";
  pid_t writer =
      maru_test::Fork([&] { return group.RunClientOn(0, "store-log /bench 0 65536 " + log); });
  std::vector<double> gaps_ms, takeover_ms;
  for (int r = 0; r < rounds; ++r) {
    const size_t before = Seals(log).size();
    if (!maru_test::WaitFor([&] { return Seals(log).size() >= before + 20; }, 30000))
      return fprintf(stderr, "the writer stalled:\n%s\n", group.Logs().c_str()), 1;
    const int leader = group.Leader();
    const int64_t kill_ns = NowNs();
    group.server(leader).Kill9();
    const int next = group.WaitForNewLeader(leader);
    const int64_t served_ns = NowNs();
    std::vector<int64_t> seals;
    if (next < 0 ||
        !maru_test::WaitFor([&] { return (seals = Seals(log)).back() > served_ns; }, 30000))
      return fprintf(stderr, "no failover:\n%s\n", group.Logs().c_str()), 1;
    // The longest pause between two seals from just before the kill to the
    // first seal the new leader served (a seal in flight at the kill may
    // still be logged just after it).
    auto i = std::upper_bound(seals.begin(), seals.end(), kill_ns);
    const auto last = std::upper_bound(seals.begin(), seals.end(), served_ns);
    int64_t gap = 0;
    for (; i <= last && i != seals.end(); ++i) gap = std::max(gap, *i - *(i - 1));
    gaps_ms.push_back(gap / 1e6);
    takeover_ms.push_back((served_ns - kill_ns) / 1e6);
    printf("round %2d: h%d killed, h%d leads; the writer's gap %.0f ms\n", r, leader, next,
           gaps_ms.back());
    fflush(stdout);
    if (!group.StartStandby(leader)) return fprintf(stderr, "h%d did not come back\n", leader), 1;
  }
  std::ofstream(log + ".stop") << "";
  const int rc = maru_test::Wait(writer);
  printf("\n%d failovers (kill -9 of the leader), %zu chunks stored in all (writer exit %d)\n",
         rounds, Seals(log).size(), rc);
  printf("  the writer's gap        p50 %.0f ms, p99 %.0f ms, max %.0f ms\n",
         Percentile(gaps_ms, 0.5), Percentile(gaps_ms, 0.99),
         *std::max_element(gaps_ms.begin(), gaps_ms.end()));
  printf("  kill -> new leader up   p50 %.0f ms, p99 %.0f ms\n", Percentile(takeover_ms, 0.5),
         Percentile(takeover_ms, 0.99));
  return rc;
}
