// maru-bench suite: brings up a Maru node (pool in /dev/shm, maru-server,
// maru-fuse, maru-agent) and a redis-server beside it, runs the other
// maru-bench commands against each, side by side in one run, and writes a
// Markdown table and a plot. Every figure is also a ratio, to memcpy or to
// Redis measured in the same run.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cinttypes>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "bench/common.h"
#include "bench/node.h"
#include "bench/redis_client.h"
#include "util/units.h"

namespace maru::bench {
namespace {

// UCX over TCP on the loopback interface only: with every interface, UCX
// also offers the peer addresses on interfaces that come and go (a test's
// veth pair), and a connection set up through a vanished one is reset.
const std::vector<std::string> kUcxLoopback = {"UCX_TLS=tcp", "UCX_NET_DEVICES=lo"};

struct Settings {
  uint64_t pool = 2ull << 30, size = 32ull << 20;
  int rounds = 8, files = 6, lookup_seconds = 2, ops_seconds = 1, trace_limit = 0, clients = 4;
  int remote_pairs = 3;  // UCX's own get/put, then the remote path: this many times
  std::vector<int> consumers{1, 2, 4, 8};
  std::string ops_counts = "1,2,4";  // threads, and processes, for lookups and opens
};

class Suite {
 public:
  Suite(Settings s, std::string trace, std::string out_dir)
      : s_(std::move(s)), trace_(std::move(trace)), out_(std::move(out_dir)) {}
  int Run();

 private:
  bool StartNode();
  bool StartRedis();
  // Runs `maru-bench ARGS --json`; the JSON line, or "" after printing why.
  std::string Bench(const std::string &what, std::vector<std::string> args,
                    const std::vector<std::string> &env = {});
  void Measure();
  void MeasureRemote();
  double Get(const std::string &what, const std::string &field) const;
  // The median over the remote pairs of `f(pair's name suffix)`.
  double RemoteMedian(const std::function<double(const std::string &)> &f) const;
  std::string TransferTable() const;
  std::string RemoteTable() const;
  std::string FilesTable() const;
  std::string MetadataTable() const;
  std::string ReplayTable() const;
  bool Plot(const std::string &png, std::string *error) const;
  // The Markdown section into OUT/benchmarks.md, and the plot beside it.
  void Write();

  Settings s_;
  std::string trace_, out_;
  std::string work_, tmpfs_;
  int redis_port_ = 0;
  Processes procs_;
  std::unique_ptr<Node> node_;
  std::map<std::string, std::string> results_;  // what -> JSON
  std::string agent_mode_ = "?";                // the agent's data path, from its log
  std::vector<std::string> notes_;
};

bool Suite::StartNode() {
  std::string error;
  node_ = std::make_unique<Node>(work_, &procs_);
  // Watermarks at 1: the pool's capacity is what the offline simulations use.
  if (!node_->Format(s_.pool, 0, &error) ||
      !node_->StartServer({"--high-watermark", "1", "--low-watermark", "1"}, &error))
    return Fail(error), false;
  if (!node_->Mount(&error))
    notes_.push_back("maru-fuse could not mount (" + error.substr(0, error.find('\n')) +
                     "): no filesystem rows");
  const std::string agent_log = work_ + "/agent.log";
  procs_.Start({Sibling("maru-agent", "src/rdma"), "--pool", node_->pool(), "--server",
                node_->address(), "--listen", "tcp://127.0.0.1:0", "--log-level", "info"},
               agent_log, kUcxLoopback);
  if (!WaitUntil(
          [&] {
            std::ifstream f(agent_log);
            std::stringstream ss;
            ss << f.rdbuf();
            const std::string log = ss.str();
            const size_t at = log.find("serving");
            if (at == std::string::npos) return false;
            // "serving N device(s) at ADDRESS (MODE data path)"
            const size_t open = log.find('(', log.find(" at ", at)),
                         end = log.find(" data path", at);
            if (open != std::string::npos && end != std::string::npos && open < end)
              agent_mode_ = log.substr(open + 1, end - open - 1);
            return true;
          },
          60))
    notes_.push_back("maru-agent did not start: no UCX rows");
  return true;
}

bool Suite::StartRedis() {
  const std::string redis = FromPath("redis-server");
  if (redis.empty()) {
    notes_.push_back("redis-server is not installed (scripts/install-deps.sh installs it)");
    return false;
  }
  for (int attempt = 0; attempt < 5 && !redis_port_; ++attempt) {
    // Below the kernel's ephemeral ports (32768 on), which others may hold.
    const int port = 20000 + (getpid() * 7 + attempt * 131) % 12000;
    pid_t pid =
        procs_.Start({redis, "--port", std::to_string(port), "--bind", "127.0.0.1", "--save", "",
                      "--appendonly", "no", "--protected-mode", "no", "--maxmemory",
                      std::to_string(s_.pool), "--maxmemory-policy", "allkeys-lru"},
                     work_ + "/redis.log");
    if (pid > 0 && WaitUntil(
                       [&] {
                         // Ours, alive: not some other listener on the port.
                         if (procs_.Exited(pid)) return false;
                         Result<RedisClient *> c = RedisClient::Connect("127.0.0.1", port);
                         if (!c.ok()) return false;
                         std::unique_ptr<RedisClient> r(*c);
                         return r->Command({"PING"}).ok();
                       },
                       5))
      redis_port_ = port;
  }
  if (!redis_port_) notes_.push_back("redis-server did not start: no Redis rows");
  return redis_port_ != 0;
}

std::string Suite::Bench(const std::string &what, std::vector<std::string> args,
                         const std::vector<std::string> &env) {
  args.insert(args.begin(), Sibling("maru-bench", "tools"));
  args.push_back("--json");
  fprintf(stderr, "  %-34s", what.c_str());
  const int64_t t0 = MonotonicNs();
  std::string out;
  int rc = Processes::Run(args, &out, env);
  std::string json = LastJson(out);
  fprintf(stderr, "%s (%.0f s)\n", rc == 0 ? "done" : "FAILED",
          static_cast<double>(MonotonicNs() - t0) / 1e9);
  if (rc != 0 || json.empty()) {
    notes_.push_back(what + " failed: " + out.substr(out.rfind('\n', out.size() - 2) + 1));
    return "";
  }
  results_[what] = json;
  return json;
}

void Suite::Measure() {
  const std::string server = node_->address(), size = std::to_string(s_.size),
                    rounds = std::to_string(s_.rounds);
  for (int n : s_.consumers) {
    Bench("maru share " + std::to_string(n),
          {"share", "--server", server, "--size", size, "--rounds", rounds, "--consumers",
           std::to_string(n)});
    if (redis_port_)
      Bench("redis share " + std::to_string(n),
            {"share", "--redis", std::to_string(redis_port_), "--size", size, "--rounds", rounds,
             "--consumers", std::to_string(n)});
  }
  MeasureRemote();
  if (node_->mounted())
    Bench("files maru-fuse", {"files", "--dir", node_->mountpoint() + "/files", "--size", size,
                              "--count", std::to_string(s_.files)});
  Bench("files tmpfs",
        {"files", "--dir", tmpfs_, "--size", size, "--count", std::to_string(s_.files)});
  Bench("lookup 128",
        {"lookup", "--server", server, "--keys", "128", "--threads", s_.ops_counts, "--processes",
         s_.ops_counts, "--seconds", std::to_string(s_.lookup_seconds)});
  Bench("ops", {"ops", "--server", server, "--threads", s_.ops_counts, "--processes", s_.ops_counts,
                "--seconds", std::to_string(s_.ops_seconds)});
  if (access(trace_.c_str(), R_OK) != 0) {
    notes_.push_back("no trace at " + trace_ + ": no replay rows (--trace FILE)");
    return;
  }
  std::vector<std::string> replay{"replay", "--trace", trace_, "--clients",
                                  std::to_string(s_.clients)};
  if (s_.trace_limit) replay.insert(replay.end(), {"--limit", std::to_string(s_.trace_limit)});
  std::vector<std::string> maru = replay;
  maru.insert(maru.end(), {"--server", server, "--dir", "/replay"});
  std::string json = Bench("replay maru", maru);
  if (redis_port_ && !json.empty()) {
    // The same capacity in bytes: Redis's maxmemory, as blocks.
    const double blocks = Field(json, "/capacity_blocks"), bytes = Field(json, "/block_bytes");
    std::string out;
    Result<RedisClient *> c = RedisClient::Connect("127.0.0.1", redis_port_);
    if (c.ok()) {
      std::unique_ptr<RedisClient> r(*c);
      r->Command({"FLUSHALL"});
      r->Command(
          {"CONFIG", "SET", "maxmemory", std::to_string(static_cast<uint64_t>(blocks * bytes))});
    }
    std::vector<std::string> redis = replay;
    redis.insert(redis.end(), {"--redis", std::to_string(redis_port_), "--capacity-blocks",
                               std::to_string(static_cast<uint64_t>(blocks))});
    Bench("replay redis", redis);
  }
}

// The remote path against its transport's ceiling: UCX's own get/put
// (`maru-bench ucx`), then libmaru_direct's remote store and load through
// the agent in its default mode, in alternating pairs, so that a change in
// the host's load moves both sides of a pair alike.
void Suite::MeasureRemote() {
  const std::string size = std::to_string(s_.size), rounds = std::to_string(s_.rounds);
  for (int i = 1; i <= s_.remote_pairs; ++i) {
    const std::string k = std::to_string(i);
    Bench("ucx ceiling " + k, {"ucx", "--size", size, "--rounds", rounds}, kUcxLoopback);
    Bench("ucx share " + k,
          {"share", "--server", node_->address(), "--size", size, "--rounds", rounds, "--consumers",
           "1"},
          {"MARU_DATA=remote", kUcxLoopback[0], kUcxLoopback[1]});
  }
}

double Suite::RemoteMedian(const std::function<double(const std::string &)> &f) const {
  std::vector<double> v;
  for (int i = 1; i <= s_.remote_pairs; ++i)
    if (double x = f(std::to_string(i)); !std::isnan(x)) v.push_back(x);
  return v.empty() ? std::nan("") : Quantile(v, 0.5);
}

double Suite::Get(const std::string &what, const std::string &field) const {
  auto it = results_.find(what);
  return it == results_.end() ? std::nan("") : Field(it->second, "/" + field);
}

// Each row's ratio is to the plain copy its own run measured exactly like
// it (share.cc): the same bytes, buffers and cache state, in the same
// rounds, N copies at once for N consumers. A ratio to one memcpy between
// cached buffers, as a loop of memcpy measures, is beside it.
std::string Suite::TransferTable() const {
  const double mc = Get("maru share 1", "memcpy_gbps");
  std::ostringstream md;
  md << "| workload | Maru | ×its copy | ×memcpy | Redis (loopback) | ×its copy | Maru ÷ Redis "
        "|\n"
     << "|---|---|---|---|---|---|---|\n"
     << "| memcpy between cached buffers | " << Fmt("%.2f GB/s", mc) << " | | 1.00 | | | |\n";
  auto row = [&](const std::string &name, const std::string &maru, const std::string &redis,
                 const char *gbps, const char *ratio) {
    const double m = Get(maru, gbps), r = Get(redis, gbps);
    md << "| " << name << " | " << Fmt("%.2f GB/s", m) << " | " << Fmt("%.2f", Get(maru, ratio))
       << " | " << Fmt("%.2f", m / mc) << " | " << Fmt("%.2f GB/s", r) << " | "
       << Fmt("%.2f", Get(redis, ratio)) << " | " << Fmt("%.1f×", m / r) << " |\n";
  };
  row("store, 1 producer", "maru share 1", "redis share 1", "store_gbps", "store_vs_copy");
  for (int n : s_.consumers) {
    const std::string k = std::to_string(n);
    row("load, " + k + " consumer" + (n > 1 ? "s (all together)" : ""), "maru share " + k,
        "redis share " + k, "load_gbps", "load_vs_copy");
  }
  auto remote = [&](const char *field) {
    return RemoteMedian([&](const std::string &k) { return Get("ucx share " + k, field); });
  };
  const double us = remote("store_gbps"), ul = remote("load_gbps");
  md << "| UCX remote store / load, 1 consumer (TCP) | " << Fmt("%.2f", us) << " / "
     << Fmt("%.2f GB/s", ul) << " | | " << Fmt("%.2f", us / mc) << " / " << Fmt("%.2f", ul / mc)
     << " | | | |\n\n";
  const double store = Get("maru share 1", "store_vs_copy"),
               load = Get("maru share 1", "load_vs_copy");
  auto verdict = [](double ratio, double goal) {
    return std::isnan(ratio) ? "not measured" : ratio >= goal ? "met" : "not met";
  };
  md << "Its copy: the store beside the best plain copy (memcpy, or the library's streaming copy) "
        "of the same source into memory out of the cache, as a fresh extent is; the loads beside "
        "as many memcpys at once, from memory out of the cache into the same buffers of the same "
        "consumers; in the same rounds, ratios the medians of the rounds'. Store ≥ 0.9× its "
        "copy: **"
     << verdict(store, 0.9) << "** (" << Fmt("%.2f", store)
     << "); load, 1 consumer, ≥ 0.95× its copy: **" << verdict(load, 0.95) << "** ("
     << Fmt("%.2f", load) << ").\n\n";
  return md.str();
}

std::string Suite::RemoteTable() const {
  std::ostringstream md;
  md << "| remote path (UCX over TCP, loopback), agent's data path: " << agent_mode_
     << " | UCX's own `ucp_put` | remote store | store ÷ put | UCX's own `ucp_get` | remote load "
        "| load ÷ get |\n|---|---|---|---|---|---|---|\n";
  auto ratio = [&](const std::string &k, const char *mine, const char *ucx) {
    return Get("ucx share " + k, mine) / Get("ucx ceiling " + k, ucx);
  };
  for (int i = 1; i <= s_.remote_pairs; ++i) {
    const std::string k = std::to_string(i);
    md << "| pair " << k << " (GB/s, medians of " << s_.rounds << " transfers) | "
       << Fmt("%.2f", Get("ucx ceiling " + k, "put_gbps")) << " | "
       << Fmt("%.2f", Get("ucx share " + k, "store_gbps")) << " | "
       << Fmt("%.2f", ratio(k, "store_gbps", "put_gbps")) << " | "
       << Fmt("%.2f", Get("ucx ceiling " + k, "get_gbps")) << " | "
       << Fmt("%.2f", Get("ucx share " + k, "load_gbps")) << " | "
       << Fmt("%.2f", ratio(k, "load_gbps", "get_gbps")) << " |\n";
  }
  const double store =
      RemoteMedian([&](const std::string &k) { return ratio(k, "store_gbps", "put_gbps"); });
  const double load =
      RemoteMedian([&](const std::string &k) { return ratio(k, "load_gbps", "get_gbps"); });
  md << "| ÷ UCX, median of the pairs | | | " << Fmt("%.2f", store) << " | | | "
     << Fmt("%.2f", load) << " |\n\n"
     << "Remote store ≥ 0.8× UCX's own put: **"
     << (std::isnan(store) ? "not measured"
         : store >= 0.8    ? "met"
                           : "not met")
     << "** (" << Fmt("%.2f", store) << "); remote load ≥ 0.8× UCX's own get: **"
     << (std::isnan(load) ? "not measured"
         : load >= 0.8    ? "met"
                          : "not met")
     << "** (" << Fmt("%.2f", load) << ").\n\n";
  return md.str();
}

std::string Suite::FilesTable() const {
  const double fw = Get("files maru-fuse", "write_gbps"), fr = Get("files maru-fuse", "read_gbps"),
               tw = Get("files tmpfs", "write_gbps"), tr = Get("files tmpfs", "read_gbps");
  std::ostringstream md;
  md << "| files (1 MiB write/read calls) | maru-fuse | tmpfs | ×tmpfs |\n|---|---|---|---|\n"
     << "| write + close | " << Fmt("%.2f GB/s", fw) << " | " << Fmt("%.2f GB/s", tw) << " | "
     << Fmt("%.2f", fw / tw) << " |\n"
     << "| cold read | " << Fmt("%.2f GB/s", fr) << " | " << Fmt("%.2f GB/s", tr) << " | "
     << Fmt("%.2f", fr / tr) << " |\n\n";
  return md.str();
}

std::string Suite::MetadataTable() const {
  std::ostringstream md;
  md << "| metadata: through the shared-memory index / by message (fast lane) | index | message "
        "| index ÷ message | cores the clients got (index / message) |\n|---|---|---|---|---|\n";
  auto rows = [&](const std::string &what, const std::string &op, const char *unit) {
    auto it = results_.find(what);
    if (it == results_.end()) return;
    for (int i = 0;; ++i) {  // one run per thread or process count
      const std::string run = "/runs/" + std::to_string(i);
      const double ix = Field(it->second, run + "/index_per_s"),
                   msg = Field(it->second, run + "/message_per_s");
      if (std::isnan(ix)) break;
      for (const char *kind : {"threads", "processes"}) {
        const double n = Field(it->second, run + "/" + kind);
        if (std::isnan(n)) continue;
        const int k = static_cast<int>(n);
        const std::string noun = k > 1 ? kind : kind[0] == 't' ? "thread" : "process";
        md << "| " << op << ", " << k << " " << noun << " (summed) | "
           << Fmt(("%.0f " + std::string(unit)).c_str(), ix) << " | "
           << Fmt(("%.0f " + std::string(unit)).c_str(), msg) << " | " << Fmt("%.1f×", ix / msg)
           << " | " << Fmt("%.2f", Field(it->second, run + "/index_cores")) << " / "
           << Fmt("%.2f", Field(it->second, run + "/message_cores")) << " |\n";
      }
    }
  };
  md << "| batched prefix lookup, 128 keys, 1 thread, p50 / p99 | "
     << Fmt("%.1f", Get("lookup 128", "runs/0/index_p50_us")) << " / "
     << Fmt("%.0f µs", Get("lookup 128", "runs/0/index_p99_us")) << " | "
     << Fmt("%.1f", Get("lookup 128", "runs/0/message_p50_us")) << " / "
     << Fmt("%.0f µs", Get("lookup 128", "runs/0/message_p99_us")) << " | "
     << Fmt("%.1f× (p50)",
            Get("lookup 128", "runs/0/message_p50_us") / Get("lookup 128", "runs/0/index_p50_us"))
     << " | |\n";
  rows("lookup 128", "128-key lookups", "/s");
  md << "| open + release of 1 chunk, 1 thread, p50 / p99 | "
     << Fmt("%.2f", Get("ops", "runs/0/index_p50_us")) << " / "
     << Fmt("%.1f µs", Get("ops", "runs/0/index_p99_us")) << " | "
     << Fmt("%.1f", Get("ops", "runs/0/message_p50_us")) << " / "
     << Fmt("%.0f µs", Get("ops", "runs/0/message_p99_us")) << " | "
     << Fmt("%.0f× (p50)", Get("ops", "runs/0/message_p50_us") / Get("ops", "runs/0/index_p50_us"))
     << " | |\n";
  rows("ops", "open + release", "ops/s");
  md << "\nRates are summed over the threads or processes. Cores: the CPU time the client "
        "threads got per second; this host has "
     << std::thread::hardware_concurrency()
     << ", so rows past that count, and rows whose cores fall short of their thread count (a "
        "busy host), measure the queue for the CPU.\n\n";
  return md.str();
}

std::string Suite::ReplayTable() const {
  if (!results_.count("replay maru")) return "";
  std::ostringstream md;
  md << "| trace replay, " << s_.clients
     << " instances | block hit ratio | cached prefix p50 / p99 | requests/s |\n"
     << "|---|---|---|---|\n";
  for (const std::string sys : {"maru", "redis"}) {
    if (!results_.count("replay " + sys)) continue;
    md << "| " << sys << " | " << Fmt("%.4f", Get("replay " + sys, "hit_ratio")) << " | "
       << Fmt("%.0f", Get("replay " + sys, "prefix_p50_us")) << " / "
       << Fmt("%.0f µs", Get("replay " + sys, "prefix_p99_us")) << " | "
       << Fmt("%.0f", Get("replay " + sys, "requests_per_s")) << " |\n";
  }
  md << "\nThe cached prefix is obtained by one batched lookup and a read of every page in "
        "place (Maru), or a pipelined EXISTS and an MGET of the prefix (Redis, which evicts by "
        "its own sampled LRU at the same capacity in bytes).\n\n";
  return md.str();
}

// Load throughput against consumers, as ratios to memcpy.
bool Suite::Plot(const std::string &png, std::string *error) const {
  const double mc = Get("maru share 1", "memcpy_gbps");
  const std::string dat = work_ + "/suite.dat", script = work_ + "/suite.gp";
  {
    std::ofstream d(dat);
    for (int n : s_.consumers) {
      const std::string k = std::to_string(n);
      d << n << " " << Fmt("%.3f", Get("maru share " + k, "load_gbps") / mc) << " "
        << Fmt("%.3f", Get("redis share " + k, "load_gbps") / mc) << " "
        << Fmt("%.3f", Get("maru share " + k, "load_copy_gbps") / mc) << "\n";
    }
    std::ofstream g(script);
    g << "set terminal png size 800,480\nset output '" << png << "'\n"
      << "set title 'Loading shared " << FormatSize(s_.size) << " KV chunks'\n"
      << "set xlabel 'consumer processes'\nset ylabel 'load throughput, x memcpy between cached "
         "buffers'\n"
      << "set style data histograms\nset style fill solid 0.8\nset boxwidth 0.9\n"
      << "set yrange [0:*]\nset key top right\nset datafile missing '–'\n"
      << "plot '" << dat << "' using 2:xtic(1) title 'Maru (shared pool)', '' using 3 title "
      << "'Redis (loopback)', '' using 4 title 'as many memcpys at once from uncached memory'\n";
  }
  const std::string gnuplot = FromPath("gnuplot");
  if (gnuplot.empty()) return *error = "gnuplot is not installed", false;
  return Processes::Run({gnuplot, script}, error) == 0;
}

void Suite::Write() {
  const std::string doc = out_ + "/benchmarks.md", png = out_ + "/benchmarks-suite.png";
  std::string error;
  if (!Plot(png, &error)) notes_.push_back("no plot: " + error.substr(0, error.find('\n')));
  char stamp[64];
  time_t now = time(nullptr);
  strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M", localtime(&now));
  std::ostringstream md;
  md << SectionBegin("suite") << "\n## Side by side: `maru-bench suite`\n\n"
     << "Made by `maru-bench suite" << (s_.size < (32ull << 20) ? " (small sizes)" : "") << "` on "
     << stamp << ", one run, " << FormatSize(s_.size)
     << " chunks. Loads copy into the consumer's own buffer, as a Redis GET does. GB/s are "
        "medians; ratios are to plain copies and to Redis, all measured in this run.\n\n"
     << TransferTable() << RemoteTable() << FilesTable() << MetadataTable() << ReplayTable();
  for (const std::string &n : notes_) md << "- " << n << "\n";
  md << "\n![load throughput by consumers](benchmarks-suite.png)\n" << SectionEnd("suite") << "\n";
  printf("%s", md.str().c_str());
  if (!WriteSection(doc, "suite", md.str())) {
    notes_.push_back("cannot write " + doc);
    Fail("cannot write " + doc);
    return;
  }
  printf("written: %s, %s\n", doc.c_str(), png.c_str());
}

int Suite::Run() {
  char tmpl[] = "/tmp/maru-suite.XXXXXX";
  if (!mkdtemp(tmpl)) return Fail("cannot make a work directory");
  work_ = tmpl;
  tmpfs_ = "/dev/shm/maru-suite-" + std::to_string(getpid()) + ".tmpfs";
  Node::RemoveOnSignal(work_);
  Node::RemoveOnSignal(tmpfs_);
  mkdir(out_.c_str(), 0755);
  bool ok = StartNode();
  fprintf(stderr, "maru-bench suite: node on %s, work in %s\n", node_->pool().c_str(),
          work_.c_str());
  if (ok) {
    StartRedis();
    Measure();
    Write();
  }
  node_->Stop();
  procs_.StopAll();
  std::error_code ec;
  std::filesystem::remove_all(work_, ec);
  std::filesystem::remove_all(tmpfs_, ec);
  return ok && notes_.empty() ? 0 : 1;
}

}  // namespace

int RunSuite(int argc, char **argv) {
  std::string trace = "bench/traces/mooncake_conversation_trace.jsonl", out = "docs";
  bool quick = false, tiny = false;
  Flags flags("maru-bench suite [--quick] [--out DIR] [--trace FILE]",
              "Starts a Maru node on a pool in /dev/shm (server, mount, agent) and a\n"
              "redis-server on loopback, then measures side by side: memcpy; libmaru_direct\n"
              "store/load with 1 producer and 1, 2, 4, 8 consumer processes; the same over\n"
              "Redis; remote store and load through maru-agent beside UCX's own put and get;\n"
              "files on the mount and on tmpfs; batched lookups and opens/s at 1, 2, 4\n"
              "threads and processes, through the index and by message; the trace replayed\n"
              "by 4 instances on Maru and on Redis. Writes a Markdown section into "
              "DIR/benchmarks.md and a plot,\n"
              "DIR/benchmarks-suite.png. Stops everything it started.");
  flags.Bool("quick", &quick, "small sizes: done within 3 minutes on 2 cores");
  flags.Bool("tiny", &tiny, "the smallest run that exercises everything (for tests)");
  flags.String("out", &out, "where benchmarks.md and the plot go");
  flags.String("trace", &trace, "Mooncake-format trace to replay");
  if (int rc = ParseFlags(flags, argc, argv); rc >= 0) return rc;
  Settings s;
  if (quick) {
    s.pool = 512ull << 20;
    s.rounds = 4;
    s.files = 3;
    s.lookup_seconds = 1;
    s.remote_pairs = 2;
    s.trace_limit = 1500;
  }
  if (tiny) {
    s.pool = 128ull << 20;
    s.size = 1ull << 20;
    s.rounds = 2;
    s.files = 2;
    s.lookup_seconds = 1;
    s.trace_limit = 100;
    s.clients = 2;
    s.consumers = {1, 2};
    s.remote_pairs = 1;
    s.ops_counts = "1,2";
  }
  return Suite(s, trace, out).Run();
}

}  // namespace maru::bench
