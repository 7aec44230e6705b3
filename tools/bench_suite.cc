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

#include "bench_common.h"
#include "bench_node.h"
#include "redis_client.h"
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
  std::vector<int> consumers{1, 2, 4, 8};
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
  double Get(const std::string &what, const std::string &field) const;
  std::string TransferTable() const;
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
            return ss.str().find("serving") != std::string::npos;
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
  Bench("ucx share 1",
        {"share", "--server", server, "--size", size, "--rounds", rounds, "--consumers", "1"},
        {"MARU_DATA=remote", kUcxLoopback[0], kUcxLoopback[1]});
  // UCX's own get/put on the same transport, right after: the ceiling.
  Bench("ucx ceiling", {"ucx", "--size", size, "--rounds", rounds}, kUcxLoopback);
  if (node_->mounted())
    Bench("files maru-fuse", {"files", "--dir", node_->mountpoint() + "/files", "--size", size,
                              "--count", std::to_string(s_.files)});
  Bench("files tmpfs",
        {"files", "--dir", tmpfs_, "--size", size, "--count", std::to_string(s_.files)});
  Bench("lookup 128", {"lookup", "--server", server, "--keys", "128", "--threads", "1", "--seconds",
                       std::to_string(s_.lookup_seconds)});
  Bench("ops", {"lookup", "--server", server, "--keys", "1", "--threads", "1,2,4,8", "--seconds",
                std::to_string(s_.ops_seconds), "--dir", "/maru-bench/ops"});
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

double Suite::Get(const std::string &what, const std::string &field) const {
  auto it = results_.find(what);
  return it == results_.end() ? std::nan("") : Field(it->second, "/" + field);
}

std::string Suite::TransferTable() const {
  const double mc = Get("maru share 1", "memcpy_gbps");
  std::ostringstream md;
  md << "| workload | Maru | ×memcpy | Redis (loopback) | ×memcpy | Maru ÷ Redis |\n"
     << "|---|---|---|---|---|---|\n"
     << "| memcpy (the limit) | " << Fmt("%.2f GB/s", mc) << " | 1.00 | | | |\n";
  auto row = [&](const std::string &name, double maru, double redis) {
    md << "| " << name << " | " << Fmt("%.2f GB/s", maru) << " | " << Fmt("%.2f", maru / mc)
       << " | " << Fmt("%.2f GB/s", redis) << " | " << Fmt("%.2f", redis / mc) << " | "
       << Fmt("%.1f×", maru / redis) << " |\n";
  };
  row("store, 1 producer", Get("maru share 1", "store_gbps"), Get("redis share 1", "store_gbps"));
  for (int n : s_.consumers) {
    const std::string k = std::to_string(n);
    row("load, " + k + " consumer" + (n > 1 ? "s (all together)" : ""),
        Get("maru share " + k, "load_gbps"), Get("redis share " + k, "load_gbps"));
  }
  const double us = Get("ucx share 1", "store_gbps"), ul = Get("ucx share 1", "load_gbps");
  md << "| UCX remote store / load, 1 consumer (TCP) | " << Fmt("%.2f", us) << " / "
     << Fmt("%.2f GB/s", ul) << " | " << Fmt("%.2f", us / mc) << " / " << Fmt("%.2f", ul / mc)
     << " | | | |\n\n";
  const double cp = Get("ucx ceiling", "put_gbps"), cg = Get("ucx ceiling", "get_gbps");
  md << "| remote path (UCX over TCP, loopback) | put / store | get / load |\n|---|---|---|\n"
     << "| UCX's own `ucp_put` / `ucp_get` (`maru-bench ucx`), median | " << Fmt("%.2f GB/s", cp)
     << " | " << Fmt("%.2f GB/s", cg) << " |\n"
     << "| the same, best round | " << Fmt("%.2f GB/s", Get("ucx ceiling", "put_best_gbps"))
     << " | " << Fmt("%.2f GB/s", Get("ucx ceiling", "get_best_gbps")) << " |\n"
     << "| libmaru_direct remote store / load, through maru-agent | " << Fmt("%.2f GB/s", us)
     << " | " << Fmt("%.2f GB/s", ul) << " |\n"
     << "| ÷ UCX median | " << Fmt("%.2f", us / cp) << " | " << Fmt("%.2f", ul / cg) << " |\n\n";
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
  md << "| metadata | |\n|---|---|\n"
     << "| batched prefix lookup, 128 keys, p50 / p99 | "
     << Fmt("%.0f", Get("lookup 128", "runs/0/p50_us")) << " / "
     << Fmt("%.0f µs", Get("lookup 128", "runs/0/p99_us")) << " |\n";
  if (auto it = results_.find("ops"); it != results_.end())
    for (int i = 0;; ++i) {  // one run per thread count
      const std::string run = "/runs/" + std::to_string(i);
      const double threads = Field(it->second, run + "/threads");
      if (std::isnan(threads)) break;
      const int t = static_cast<int>(threads);
      md << "| lookup + release of 1 key, " << t << " thread" << (t > 1 ? "s" : "") << " | "
         << Fmt("%.0f ops/s", Field(it->second, run + "/lookups_per_s")) << " |\n";
    }
  md << "\n";
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
        << Fmt("%.3f", Get("redis share " + k, "load_gbps") / mc) << "\n";
    }
    std::ofstream g(script);
    g << "set terminal png size 800,480\nset output '" << png << "'\n"
      << "set title 'Loading shared " << FormatSize(s_.size) << " KV chunks'\n"
      << "set xlabel 'consumer processes'\nset ylabel 'load throughput, x memcpy'\n"
      << "set style data histograms\nset style fill solid 0.8\nset boxwidth 0.9\n"
      << "set yrange [0:*]\nset key top right\nset datafile missing '–'\n"
      << "plot '" << dat << "' using 2:xtic(1) title 'Maru (shared pool)', '' using 3 title "
      << "'Redis (loopback)'\n";
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
        "medians; ratios are to memcpy of the same size and to Redis, both measured in this "
        "run.\n\n"
     << TransferTable() << FilesTable() << MetadataTable() << ReplayTable();
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
              "Redis and over UCX; files on the mount and on tmpfs; batched lookups and\n"
              "operations/s at 1-8 threads; the trace replayed by 4 instances on Maru and on\n"
              "Redis. Writes a Markdown section into DIR/benchmarks.md and a plot,\n"
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
  }
  return Suite(s, trace, out).Run();
}

}  // namespace maru::bench
