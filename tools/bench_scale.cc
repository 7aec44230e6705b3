// maru-bench fill and scale: how metadata cost grows with the namespace.
// fill creates many small chunks from several processes; scale starts its
// own node, fills it to a million chunks (one directory of 100k among them)
// and measures server memory, RocksDB size, restart time, `ls` of the big
// directory through the mount, and lookup latency small and large.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "bench_common.h"
#include "bench_node.h"
#include "json_output.h"
#include "util/units.h"

namespace maru::bench {
namespace {

int FillWorker(const std::string &server, const std::string &dir, int64_t first, int64_t count,
               int64_t per_dir, uint64_t size, int64_t worker, int64_t workers) {
  maru_t *m;
  if (int rc = maru_connect(server.c_str(), &m))
    return Fail("connect: " + std::string(maru_strerror(rc)));
  int failures = 0;
  for (int64_t i = first + worker; i < first + count; i += workers) {
    char path[512];
    snprintf(path, sizeof(path), "%s/d%05" PRId64 "/c%07" PRId64, dir.c_str(), i / per_dir, i);
    maru_chunk_t *c;
    int rc = maru_create(m, path, size, &c);
    if (rc == -EEXIST) continue;
    if (rc == 0) {
      // Metadata is what is measured: the bytes are left as the pool has them.
      rc = maru_seal(c);
      maru_release(c);
    }
    if (rc && ++failures <= 3)
      fprintf(stderr, "maru-bench fill: %s: %s\n", path, maru_strerror(rc));
  }
  maru_disconnect(m);
  return failures ? 1 : 0;
}

int64_t RssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return strtoll(line.c_str() + 6, nullptr, 10);
  return -1;
}

double Seconds(int64_t since_ns) {
  return static_cast<double>(MonotonicNs() - since_ns) / 1e9;
}

// The server measured with a given number of chunks in its namespace.
struct Point {
  int64_t chunks;
  double rss_mib, db_mib;
  std::string lookup;  // maru-bench lookup's JSON
};

struct Figures {
  int64_t chunks, wide, small, procs;
  double small_rate, wide_rate, bulk_rate;  // chunks/s
  double ls_f, ls_l, listed, restart;       // seconds, entries, seconds
  std::vector<Point> points;                // empty, small, all, all after a restart
};

std::string Report(const Figures &f) {
  std::ostringstream md;
  md << SectionBegin("scale") << "\n## Scale: metadata at a million chunks\n\n"
     << "Made by `maru-bench scale --chunks " << f.chunks << " --wide " << f.wide
     << "`: a node on a 4 KiB-unit pool, filled by " << f.procs
     << " client processes (create + seal, bytes untouched). Fill rate: "
     << Fmt("%.0f", f.small_rate) << " chunks/s for the first " << f.small << ", "
     << Fmt("%.0f", f.wide_rate) << " into one directory, " << Fmt("%.0f", f.bulk_rate)
     << " for the rest.\n\n"
     << "| chunks in the namespace | server RSS | RocksDB on disk | 128-key lookup p50 / p99 |\n"
     << "|---|---|---|---|\n";
  for (size_t i = 0; i < f.points.size(); ++i) {
    const Point &p = f.points[i];
    md << "| " << p.chunks << (i == 3 ? " (after a restart)" : "") << " | "
       << Fmt("%.0f MiB", p.rss_mib) << " | " << Fmt("%.0f MiB", p.db_mib) << " | "
       << Fmt("%.0f", Field(p.lookup, "/runs/0/p50_us")) << " / "
       << Fmt("%.0f µs", Field(p.lookup, "/runs/0/p99_us")) << " |\n";
  }
  const double per_chunk =
      (f.points[2].rss_mib - f.points[0].rss_mib) * 1048576.0 / static_cast<double>(f.chunks);
  md << "\n- Memory per chunk: " << Fmt("%.0f", per_chunk) << " bytes of server RSS.\n"
     << "- Restart with " << f.chunks << " chunks: " << Fmt("%.1f s", f.restart)
     << " until the server answers (RocksDB read, extent maps rebuilt).\n"
     << "- `ls -f` of the " << Fmt("%.0f", f.listed)
     << "-entry directory through the mount: " << Fmt("%.2f s", f.ls_f)
     << "; `ls -l` (a stat each): " << Fmt("%.2f s", f.ls_l) << ".\n"
     << "- Lookup latency at " << f.chunks << " against " << f.small << " chunks: "
     << Fmt("%.2f×", Field(f.points[2].lookup, "/runs/0/p50_us") /
                         Field(f.points[1].lookup, "/runs/0/p50_us"))
     << " (p50).\n"
     << SectionEnd("scale") << "\n";
  return md.str();
}

}  // namespace

int RunFill(int argc, char **argv) {
  std::string server = "unix:///run/maru/maru.sock", dir = "/maru-bench/fill";
  int64_t count = 10000, first = 0, per_dir = 10000, procs = 4;
  uint64_t size = 4096;
  bool json = false;
  Flags flags("maru-bench fill [--server ADDRESS] [--dir DIR] [--count N] [--per-dir N]",
              "Creates and seals N chunks named DIR/dNNNNN/cNNNNNNN, PER-DIR to a directory,\n"
              "from several processes; their bytes are not written.");
  flags.String("server", &server, "maru-server address");
  flags.String("dir", &dir, "where the chunks go");
  flags.Int("count", &count, "chunks to create");
  flags.Int("first", &first, "number of the first chunk");
  flags.Int("per-dir", &per_dir, "chunks to a directory");
  flags.Int("procs", &procs, "client processes");
  flags.Size("size", &size, "chunk size");
  flags.Bool("json", &json, "end with one JSON line of the figures");
  if (int rc = ParseFlags(flags, argc, argv); rc >= 0) return rc;
  if (count <= 0 || first < 0 || per_dir <= 0 || procs <= 0 || procs > 64 || size == 0)
    return Fail("--count, --per-dir, --procs (up to 64) and --size must be positive");
  const int64_t start = MonotonicNs();
  std::vector<pid_t> pids;
  for (int64_t w = 0; w < procs; ++w) {
    fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) _exit(FillWorker(server, dir, first, count, per_dir, size, w, procs));
    pids.push_back(pid);
  }
  bool failed = false;
  for (pid_t pid : pids) {
    int status;
    waitpid(pid, &status, 0);
    failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  const double seconds = Seconds(start);
  printf("created %" PRId64 " chunks in %.1f s (%.0f/s)\n", count, seconds,
         static_cast<double>(count) / seconds);
  if (json)
    PrintJson({{"chunks", count}, {"per_s", Rounded(static_cast<double>(count) / seconds, 1)}});
  return failed ? Fail("some chunks could not be created") : 0;
}

int RunScale(int argc, char **argv) {
  int64_t chunks = 1000000, wide = 100000, small = 10000, procs = 4;
  std::string out = "docs";
  Flags flags("maru-bench scale [--chunks N] [--wide N] [--out DIR]",
              "Starts a node on a pool in /dev/shm (4K unit), fills its namespace with N\n"
              "chunks (one directory holds --wide of them), and reports how metadata cost\n"
              "grows: server memory, RocksDB size, restart time, ls of the wide directory\n"
              "through the mount, lookup latency at --small chunks and at N. Writes a\n"
              "Markdown section into DIR/benchmarks.md.");
  flags.Int("chunks", &chunks, "chunks in the end");
  flags.Int("wide", &wide, "chunks in the one wide directory");
  flags.Int("small", &small, "the small namespace measured first");
  flags.Int("procs", &procs, "client processes that fill it");
  flags.String("out", &out, "where benchmarks.md goes");
  if (int rc = ParseFlags(flags, argc, argv); rc >= 0) return rc;
  if (small <= 0 || wide <= 0 || chunks < small + wide)
    return Fail("need 0 < --small, 0 < --wide, and --chunks >= --small + --wide");

  char tmpl[] = "/tmp/maru-scale.XXXXXX";
  if (!mkdtemp(tmpl)) return Fail("cannot make a work directory");
  const std::string work = tmpl;
  Node::RemoveOnSignal(work);
  Processes procs_;
  Node node(work, &procs_);
  std::string error, o;
  const uint64_t unit = 4096;
  const uint64_t pool = (static_cast<uint64_t>(chunks) + 1000) * unit + (256ull << 20);
  auto cleanup = [&](int rc) {
    node.Stop();
    procs_.StopAll();
    std::error_code ec;
    std::filesystem::remove_all(work, ec);
    return rc;
  };
  if (!node.Format(pool, unit, &error) ||
      !node.StartServer({"--high-watermark", "1", "--low-watermark", "1"}, &error) ||
      !node.Mount(&error))
    return cleanup(Fail(error));
  fprintf(stderr, "maru-bench scale: node on %s, work in %s\n", node.pool().c_str(), work.c_str());

  const std::string bench = Sibling("maru-bench", "tools");
  auto fill = [&](const std::string &dir, int64_t first, int64_t count, int64_t per_dir) {
    fprintf(stderr, "  filling %s with %" PRId64 " chunks...\n", dir.c_str(), count);
    std::string r;
    int rc = Processes::Run({bench, "fill", "--server", node.address(), "--dir", dir, "--first",
                             std::to_string(first), "--count", std::to_string(count), "--per-dir",
                             std::to_string(per_dir), "--procs", std::to_string(procs), "--json"},
                            &r);
    if (rc != 0) fprintf(stderr, "%s", r.c_str());
    return rc == 0 ? Field(LastJson(r), "/per_s") : std::nan("");
  };
  auto lookup = [&](std::string *json) {
    std::string r;
    Processes::Run({bench, "lookup", "--server", node.address(), "--keys", "128", "--threads", "1",
                    "--seconds", "2", "--dir", "/scale/lookup", "--json"},
                   &r);
    *json = LastJson(r);
  };
  auto du = [&](const std::string &path) {
    std::string r;
    Processes::Run({"du", "-sb", path}, &r);
    return strtod(r.c_str(), nullptr);
  };
  Figures f{chunks, wide, small, procs, 0, 0, 0, 0, 0, 0, 0, {}};
  auto measure = [&](int64_t n) {
    Point p{n, static_cast<double>(RssKiB(node.server_pid())) / 1024.0, du(node.db()) / 1048576.0,
            ""};
    lookup(&p.lookup);
    f.points.push_back(p);
  };

  measure(0);
  f.small_rate = fill("/scale/bulk", 0, small, 10000);
  measure(small);
  f.wide_rate = fill("/scale/wide", 0, wide, wide);
  f.bulk_rate = fill("/scale/bulk", small, chunks - small - wide, 10000);
  measure(chunks);

  // ls of the wide directory through the mount: names only, then with stat.
  const std::string wide_dir = node.mountpoint() + "/scale/wide/d00000";
  int64_t t0 = MonotonicNs();
  Processes::Run({"sh", "-c", "ls -f '" + wide_dir + "' | wc -l"}, &o);
  f.ls_f = Seconds(t0);
  f.listed = strtod(o.c_str(), nullptr) - 2;  // "." and ".."
  t0 = MonotonicNs();
  Processes::Run({"sh", "-c", "ls -l '" + wide_dir + "' > /dev/null"}, &o);
  f.ls_l = Seconds(t0);

  // A restart: everything is loaded from RocksDB again.
  node.StopServer();
  t0 = MonotonicNs();
  if (!node.StartServer({"--high-watermark", "1", "--low-watermark", "1"}, &error))
    return cleanup(Fail(error));
  f.restart = Seconds(t0);
  measure(chunks);

  const std::string md = Report(f);
  printf("%s", md.c_str());
  mkdir(out.c_str(), 0755);
  if (!WriteSection(out + "/benchmarks.md", "scale", md))
    return cleanup(Fail("cannot write " + out + "/benchmarks.md"));
  if (std::isnan(f.small_rate + f.wide_rate + f.bulk_rate))
    return cleanup(Fail("some chunks could not be created"));
  return cleanup(0);
}

}  // namespace maru::bench
