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

#include "bench/common.h"
#include "bench/node.h"
#include "bench/server_bench.h"
#include "common/json_output.h"
#include "util/units.h"

namespace maru::bench {
namespace {

// Creates and seals `paths` in batched calls; returns the failures.
int FillBatch(maru_t *m, const std::vector<std::string> &paths, uint64_t size) {
  std::vector<maru_create_req_t> reqs(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) reqs[i] = {paths[i].c_str(), size, nullptr, nullptr, 0};
  int failures = 0;
  if (int rc = maru_create_batch(m, reqs.data(), reqs.size(), nullptr)) {
    if (++failures <= 3) fprintf(stderr, "maru-bench fill: batch: %s\n", maru_strerror(rc));
    return static_cast<int>(paths.size());
  }
  std::vector<maru_chunk_t *> chunks;
  for (const maru_create_req_t &r : reqs)
    if (r.result == 0)
      chunks.push_back(r.chunk);
    else if (r.result != -EEXIST && ++failures <= 3)
      fprintf(stderr, "maru-bench fill: %s: %s\n", r.path, maru_strerror(r.result));
  std::vector<int> results(chunks.size());
  if (!chunks.empty() && maru_seal_batch(chunks.data(), chunks.size(), results.data())) ++failures;
  for (size_t i = 0; i < chunks.size(); ++i) {
    failures += results[i] != 0;
    maru_release(chunks[i]);
  }
  return failures;
}

int FillWorker(const std::string &server, const std::string &dir, int64_t first, int64_t count,
               int64_t per_dir, uint64_t size, int64_t worker, int64_t workers, int64_t batch) {
  maru_t *m = Connect(server);
  if (!m) return 1;
  int failures = 0;
  if (batch > 1) {
    std::vector<std::string> paths;
    for (int64_t i = first + worker; i < first + count; i += workers) {
      char path[512];
      snprintf(path, sizeof(path), "%s/d%05" PRId64 "/c%07" PRId64, dir.c_str(), i / per_dir, i);
      paths.push_back(path);
      if (static_cast<int64_t>(paths.size()) < batch) continue;
      failures += FillBatch(m, paths, size);
      paths.clear();
    }
    if (!paths.empty()) failures += FillBatch(m, paths, size);
    maru_disconnect(m);
    return failures ? 1 : 0;
  }
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

// A line of /proc/PID/status in KiB ("VmRSS", "RssAnon", "RssShmem").
int64_t StatusKiB(pid_t pid, const std::string &field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0)
      return strtoll(line.c_str() + field.size() + 1, nullptr, 10);
  return -1;
}

// The server's last "start: ..." line (the phases of its start, wall and CPU).
std::string StartPhases(const std::string &log_path) {
  std::ifstream log(log_path);
  std::string line, last;
  while (std::getline(log, line)) {
    const size_t at = line.find("info: start: ");
    if (at != std::string::npos) last = line.substr(at + 13);
  }
  return last;
}

double Seconds(int64_t since_ns) {
  return static_cast<double>(MonotonicNs() - since_ns) / 1e9;
}

// Creates that must evict, on a full pool: what one costs at a namespace size.
struct EvictionPoint {
  int64_t chunks = 0, pinned = 0, creates = 0;
  int64_t filled = 0;  // chunks made to fill the pool first
  double p50_us = std::nan(""), p99_us = std::nan("");
};

std::string BulkPath(int64_t i) {
  char path[128];
  snprintf(path, sizeof(path), "/scale/bulk/d%05" PRId64 "/c%07" PRId64, i / 10000, i);
  return path;
}

// Pins the first `count` chunks of /scale/bulk; one session per 32768 pins
// (the per-session limit is higher). The sessions stay open in `conns`.
bool PinBulk(const std::string &server, int64_t count, std::vector<maru_t *> *conns,
             std::string *error) {
  constexpr int64_t kBatch = 4096, kPerSession = 32768;
  for (int64_t i = 0; i < count; i += kBatch) {
    if (i % kPerSession == 0) {
      maru_t *m;
      if (int rc = maru_connect(server.c_str(), &m))
        return (*error = "connect: " + std::string(maru_strerror(rc)), false);
      conns->push_back(m);
    }
    std::vector<std::string> names;
    for (int64_t j = i; j < std::min(count, i + kBatch); ++j) names.push_back(BulkPath(j));
    std::vector<const char *> paths;
    for (const std::string &n : names) paths.push_back(n.c_str());
    std::vector<int> results(paths.size());
    if (int rc = maru_pin_batch(conns->back(), paths.data(), paths.size(), 0, results.data()))
      return (*error = "pin: " + std::string(maru_strerror(rc)), false);
    for (size_t k = 0; k < results.size(); ++k)
      if (results[k]) return (*error = names[k] + ": " + maru_strerror(results[k]), false);
  }
  return true;
}

// `count` creates of one unit each into a full pool, each timed; every one
// evicts. The oldest 1% of the chunks are pinned, so an eviction that walks
// past chunks it may not take pays for them.
bool TimeEvictingCreates(const std::string &server, int64_t count, EvictionPoint *p,
                         std::string *error) {
  maru_t *m;
  if (int rc = maru_connect(server.c_str(), &m))
    return (*error = "connect: " + std::string(maru_strerror(rc)), false);
  std::vector<double> us;
  for (int64_t i = 0; i < count; ++i) {
    char path[64];
    snprintf(path, sizeof(path), "/scale/evicting/c%07" PRId64, i);
    maru_chunk_t *c;
    const int64_t t0 = MonotonicNs();
    int rc = maru_create(m, path, 4096, &c);
    us.push_back(static_cast<double>(MonotonicNs() - t0) / 1e3);
    if (rc == 0) {
      rc = maru_seal(c);
      maru_release(c);
    }
    if (rc) {
      maru_disconnect(m);
      return (*error = std::string(path) + ": " + maru_strerror(rc), false);
    }
  }
  maru_disconnect(m);
  p->creates = count;
  p->p50_us = Quantile(us, 0.5);
  p->p99_us = Quantile(us, 0.99);
  return true;
}

// The server measured with a given number of chunks in its namespace.
struct Point {
  int64_t chunks;
  double rss_mib, heap_mib, shm_mib, db_mib;  // heap: RssAnon; shm: RssShmem (the index)
  std::string lookup;                         // maru-bench lookup's JSON
};

struct Figures {
  int64_t chunks, wide, small, procs, fill_batch, index_entries;
  double small_rate, wide_rate, bulk_rate;  // chunks/s
  double ls_f, ls_l, listed, restart;       // seconds, entries, seconds
  double first_entry;                       // seconds until a listing yields its first entry
  std::string phases;                       // the restarted server's start phases
  std::vector<Point> points;                // empty, small, all, all after a restart
  EvictionPoint evict_small, evict_all;     // at --evict-small chunks, and at --chunks
};

std::string Report(const Figures &f) {
  std::ostringstream md;
  md << SectionBegin("scale") << "\n## Scale: metadata at " << f.chunks << " chunks\n\n"
     << "Made by `maru-bench scale --chunks " << f.chunks << " --wide " << f.wide
     << (f.index_entries ? " --index-entries " + std::to_string(f.index_entries) : "")
     << "`: a node on a 4 KiB-unit pool, filled by " << f.procs
     << " client processes (create + seal" << (f.fill_batch > 1 ? ", batched" : "")
     << ", bytes untouched). Fill rate: " << Fmt("%.0f", f.small_rate) << " chunks/s for the first "
     << f.small << ", " << Fmt("%.0f", f.wide_rate) << " into one directory, "
     << Fmt("%.0f", f.bulk_rate) << " for the rest.\n\n"
     << "| chunks in the namespace | server RSS | of it heap / index (shared) | RocksDB on disk "
        "| 128-key lookup p50 / p99, index | ... by message |\n"
     << "|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < f.points.size(); ++i) {
    const Point &p = f.points[i];
    md << "| " << p.chunks << (i == 3 ? " (after a restart; the pool filled)" : "") << " | "
       << Fmt("%.0f MiB", p.rss_mib) << " | " << Fmt("%.0f", p.heap_mib) << " / "
       << Fmt("%.0f MiB", p.shm_mib) << " | " << Fmt("%.0f MiB", p.db_mib) << " | "
       << Fmt("%.1f", Field(p.lookup, "/runs/0/index_p50_us")) << " / "
       << Fmt("%.1f µs", Field(p.lookup, "/runs/0/index_p99_us")) << " | "
       << Fmt("%.0f", Field(p.lookup, "/runs/0/message_p50_us")) << " / "
       << Fmt("%.0f µs", Field(p.lookup, "/runs/0/message_p99_us")) << " |\n";
  }
  auto per_chunk = [&](const Point &p, double Point::*mib) {
    return (p.*mib - f.points[0].*mib) * 1048576.0 / static_cast<double>(p.chunks);
  };
  auto lookup_ratio = [&](const char *path) {
    return Fmt("%.2f×", Field(f.points[2].lookup, path) / Field(f.points[1].lookup, path));
  };
  md << "\n- Memory per chunk: " << Fmt("%.0f", per_chunk(f.points[2], &Point::rss_mib))
     << " bytes of server RSS, " << Fmt("%.0f", per_chunk(f.points[2], &Point::heap_mib))
     << " of them heap (" << Fmt("%.0f", per_chunk(f.points[3], &Point::rss_mib)) << " and "
     << Fmt("%.0f", per_chunk(f.points[3], &Point::heap_mib))
     << " after the restart); the index in shared memory is made whole at start.\n"
     << "- Restart with " << f.points[3].chunks << " chunks: " << Fmt("%.1f s", f.restart)
     << " until the server answers (RocksDB read, extent maps rebuilt). Its phases: "
     << (f.phases.empty() ? "–" : f.phases) << ".\n"
     << "- `ls -f` of the " << Fmt("%.0f", f.listed)
     << "-entry directory through the mount: " << Fmt("%.2f s", f.ls_f)
     << " (the first entry of a listing after " << Fmt("%.3f s", f.first_entry) << ")"
     << "; `ls -l` (a stat each): " << Fmt("%.2f s", f.ls_l) << ".\n"
     << "- Lookup latency at " << f.chunks << " against " << f.small
     << " chunks (p50): " << lookup_ratio("/runs/0/index_p50_us") << " through the index, "
     << lookup_ratio("/runs/0/message_p50_us") << " by message.\n"
     << "- A create that must evict, on a full pool whose oldest 1% of chunks are pinned ("
     << f.evict_all.creates
     << " creates of one 4 KiB unit, one client), p50 / p99: " << Fmt("%.0f", f.evict_small.p50_us)
     << " / " << Fmt("%.0f µs", f.evict_small.p99_us) << " at " << f.evict_small.chunks
     << " chunks, " << Fmt("%.0f", f.evict_all.p50_us) << " / "
     << Fmt("%.0f µs", f.evict_all.p99_us) << " at " << f.evict_all.chunks << ": "
     << Fmt("%.2f×", f.evict_all.p50_us / f.evict_small.p50_us) << " (p50), "
     << Fmt("%.2f×", f.evict_all.p99_us / f.evict_small.p99_us) << " (p99).\n"
     << SectionEnd("scale") << "\n";
  return md.str();
}

}  // namespace

int RunFill(int argc, char **argv) {
  ServerBench bench(
      "maru-bench fill [--server ADDRESS] [--dir DIR] [--count N] [--per-dir N]",
      "Creates and seals N chunks named DIR/dNNNNN/cNNNNNNN, PER-DIR to a directory,\n"
      "from several processes; their bytes are not written.");
  int64_t count = 10000, first = 0, per_dir = 10000, procs = 4, batch = 1;
  uint64_t size = 4096;
  Flags &flags = bench.flags();
  flags.Int("count", &count, "chunks to create");
  flags.Int("first", &first, "number of the first chunk");
  flags.Int("per-dir", &per_dir, "chunks to a directory");
  flags.Int("procs", &procs, "client processes");
  flags.Int("batch", &batch, "chunks to a batched create and seal (1: one call each)");
  flags.Size("size", &size, "chunk size");
  bench.TakeDir("/maru-bench/fill", "where the chunks go");
  if (int rc = bench.Parse(argc, argv); rc >= 0) return rc;
  const std::string &server = bench.server(), &dir = bench.dir();
  if (count <= 0 || first < 0 || per_dir <= 0 || procs <= 0 || procs > 64 || size == 0 ||
      batch <= 0 || batch > MARU_BATCH_MAX)
    return Fail(
        "--count, --per-dir, --procs (up to 64), --batch (up to 4096) and --size must be positive");
  const int64_t start = MonotonicNs();
  std::vector<pid_t> pids;
  for (int64_t w = 0; w < procs; ++w) {
    fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) _exit(FillWorker(server, dir, first, count, per_dir, size, w, procs, batch));
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
  if (bench.json())
    PrintJson({{"chunks", count}, {"per_s", Rounded(static_cast<double>(count) / seconds, 1)}});
  return failed ? Fail("some chunks could not be created") : 0;
}

int RunScale(int argc, char **argv) {
  int64_t chunks = 1000000, wide = 100000, small = 10000, procs = 4;
  int64_t evict_small = 1000, evict_creates = 2000;
  bool ls_l = true;
  int64_t fill_batch = 1, index_entries = 0;
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
  flags.Int("evict-small", &evict_small,
            "chunks of the small pool that evicting creates are timed on");
  flags.Int("evict-creates", &evict_creates, "evicting creates timed at each size");
  flags.Int("fill-batch", &fill_batch, "chunks to a batched create and seal while filling");
  flags.Int("index-entries", &index_entries,
            "entries of the server's shared-memory index (0: the server's default)");
  flags.Bool("ls-l", &ls_l, "also time ls -l of the wide directory (a stat each: slow)");
  flags.String("out", &out, "where benchmarks.md goes");
  if (int rc = ParseFlags(flags, argc, argv); rc >= 0) return rc;
  if (small <= 0 || wide <= 0 || chunks < small + wide)
    return Fail("need 0 < --small, 0 < --wide, and --chunks >= --small + --wide");
  if (evict_small < 100 || evict_creates <= 0)
    return Fail("need --evict-small >= 100 and --evict-creates > 0");

  char tmpl[] = "/tmp/maru-scale.XXXXXX";
  if (!mkdtemp(tmpl)) return Fail("cannot make a work directory");
  const std::string work = tmpl;
  Node::RemoveOnSignal(work);
  Processes procs_;
  Node node(work, &procs_);
  std::string error, o;
  const uint64_t unit = 4096;
  const uint64_t pool = (static_cast<uint64_t>(chunks) + 1000) * unit + (256ull << 20);
  // At info level the server logs the phases of its start.
  const std::vector<std::string> server_flags = {
      "--high-watermark", "1", "--low-watermark", "1", "--grace-ms", "0", "--log-level", "info"};
  // The index sized by --index-entries is the big node's only.
  std::vector<std::string> big_flags = server_flags;
  if (index_entries > 0)
    big_flags.insert(big_flags.end(), {"--index-entries", std::to_string(index_entries)});
  auto cleanup = [&](int rc) {
    node.Stop();
    procs_.StopAll();
    std::error_code ec;
    std::filesystem::remove_all(work, ec);
    return rc;
  };

  const std::string bench = Sibling("maru-bench", "tools");
  std::string address;  // the node being filled
  auto fill = [&](const std::string &dir, int64_t first, int64_t count, int64_t per_dir) {
    fprintf(stderr, "  filling %s with %" PRId64 " chunks...\n", dir.c_str(), count);
    std::string r;
    int rc = Processes::Run(
        {bench, "fill", "--server", address, "--dir", dir, "--first", std::to_string(first),
         "--count", std::to_string(count), "--per-dir", std::to_string(per_dir), "--procs",
         std::to_string(procs), "--batch", std::to_string(fill_batch), "--json"},
        &r);
    if (rc != 0) fprintf(stderr, "%s", r.c_str());
    return rc == 0 ? Field(LastJson(r), "/per_s") : std::nan("");
  };
  // Evicting creates on the node at `address` holding `n` chunks in
  // /scale/bulk: its first 1% pinned, the rest of the pool filled.
  auto evicting = [&](int64_t n, EvictionPoint *p) {
    p->chunks = n;
    p->pinned = std::max<int64_t>(1, n / 100);
    std::vector<maru_t *> pins;
    bool ok = PinBulk(address, p->pinned, &pins, &error);
    maru_pool_info_t info{};
    if (ok) ok = maru_pool_info(pins.back(), &info) == 0;
    p->filled = ok ? static_cast<int64_t>(info.free / info.unit) : 0;
    if (ok && p->filled > 0) ok = !std::isnan(fill("/scale/full", 0, p->filled, 10000));
    fprintf(stderr, "  timing %" PRId64 " evicting creates at %" PRId64 " chunks...\n",
            evict_creates, n);
    if (ok) ok = TimeEvictingCreates(address, evict_creates, p, &error);
    if (ok)
      fprintf(stderr, "  evicting creates at %" PRId64 " chunks: p50 %.0f us, p99 %.0f us\n", n,
              p->p50_us, p->p99_us);
    for (maru_t *m : pins) maru_disconnect(m);
    if (!ok) fprintf(stderr, "maru-bench scale: evicting creates: %s\n", error.c_str());
    return ok;
  };
  Figures f{chunks, wide, small, procs, fill_batch, index_entries, 0, 0, 0, 0, 0, 0, 0,
            0,      "",   {},    {},    {}};

  // The small point first, on a node of its own sized to it.
  {
    Node little(work + "/little", &procs_);
    std::filesystem::create_directories(work + "/little");
    if (!little.Format((static_cast<uint64_t>(evict_small) + 1000) * unit + (16ull << 20), unit,
                       &error) ||
        !little.StartServer(server_flags, &error))
      return cleanup(Fail(error));
    address = little.address();
    if (std::isnan(fill("/scale/bulk", 0, evict_small, 10000)) ||
        !evicting(evict_small, &f.evict_small))
      return cleanup(Fail("evicting creates on the small node failed"));
    little.Stop();
  }

  // Sparse: the chunks' bytes are never touched, and at ten million chunks
  // the pool is larger than the host's memory.
  if (!node.Format(pool, unit, &error, true) || !node.StartServer(big_flags, &error) ||
      !node.Mount(&error))
    return cleanup(Fail(error));
  address = node.address();
  fprintf(stderr, "maru-bench scale: node on %s, work in %s\n", node.pool().c_str(), work.c_str());

  auto lookup = [&](std::string *json) {
    std::string r;
    Processes::Run({bench, "lookup", "--server", node.address(), "--keys", "128", "--threads", "1",
                    "--processes", "0", "--seconds", "2", "--dir", "/scale/lookup", "--json"},
                   &r);
    *json = LastJson(r);
  };
  auto du = [&](const std::string &path) {
    std::string r;
    Processes::Run({"du", "-sb", path}, &r);
    return strtod(r.c_str(), nullptr);
  };
  auto measure = [&](int64_t n) {
    const pid_t pid = node.server_pid();
    Point p{n,
            static_cast<double>(StatusKiB(pid, "VmRSS")) / 1024.0,
            static_cast<double>(StatusKiB(pid, "RssAnon")) / 1024.0,
            static_cast<double>(StatusKiB(pid, "RssShmem")) / 1024.0,
            du(node.db()) / 1048576.0,
            ""};
    lookup(&p.lookup);
    // As measured too: a run that fails later still leaves its figures.
    fprintf(stderr,
            "  at %" PRId64
            " chunks: server RSS %.0f MiB (heap %.0f, shared %.0f), RocksDB %.0f MiB, "
            "lookup p50 %.1f us (index), %.0f us (message)\n",
            n, p.rss_mib, p.heap_mib, p.shm_mib, p.db_mib, Field(p.lookup, "/runs/0/index_p50_us"),
            Field(p.lookup, "/runs/0/message_p50_us"));
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
  Processes::Run(
      {"/usr/bin/python3", "-c", "import os, sys; next(os.scandir(sys.argv[1]))", wide_dir}, &o);
  f.first_entry = Seconds(t0);
  t0 = MonotonicNs();
  Processes::Run({"sh", "-c", "ls -f '" + wide_dir + "' | wc -l"}, &o);
  f.ls_f = Seconds(t0);
  f.listed = strtod(o.c_str(), nullptr) - 2;  // "." and ".."
  fprintf(stderr, "  ls -f of %.0f entries: %.2f s, the first after %.3f s\n", f.listed, f.ls_f,
          f.first_entry);
  f.ls_l = std::nan("");
  if (ls_l) {
    t0 = MonotonicNs();
    Processes::Run({"sh", "-c", "ls -l '" + wide_dir + "' > /dev/null"}, &o);
    f.ls_l = Seconds(t0);
  }

  // Evicting creates, while the eviction order is still the order the
  // chunks were made in (oldest first, the pinned ones among them).
  if (!evicting(chunks, &f.evict_all)) return cleanup(Fail("evicting creates failed"));

  // A restart: everything is loaded from RocksDB again.
  node.StopServer();
  t0 = MonotonicNs();
  if (!node.StartServer(big_flags, &error)) return cleanup(Fail(error));
  f.restart = Seconds(t0);
  f.phases = StartPhases(node.log());
  fprintf(stderr, "  restart: %.1f s (%s)\n", f.restart, f.phases.c_str());
  measure(chunks + f.evict_all.filled);

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
