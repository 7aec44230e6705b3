// maru-bench replay: serve a production KV-cache trace from a live server
// and compare its block hit ratio with offline LRU and Belady's optimum at
// the same capacity.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <memory>
#include <set>

#include "bench/common.h"
#include "bench/redis_client.h"
#include "bench/server_bench.h"
#include "bench/trace/kv_trace.h"
#include "bench/trace/policy_sim.h"
#include "bench/trace/trace_hints.h"
#include "common/json_output.h"
#include "util/flags.h"
#include "util/units.h"

namespace maru::bench {
namespace {

constexpr uint64_t kTokensPerBlock = 512;

struct Shared {
  std::atomic<uint64_t> next_request, done;
  std::atomic<uint64_t> blocks, hits, stored, not_stored, errors, corrupt;
  uint32_t prefix_us[];  // per request: time to obtain its cached prefix
};

// What each block holds: a client reading it in place can tell it is the
// block it asked for, written whole.
uint8_t BlockByte(uint64_t block) {
  return static_cast<uint8_t>(block * 0x9e3779b97f4a7c15ull >> 56);
}

bool HoldsBlock(maru_chunk_t *c, uint64_t block, uint64_t block_bytes) {
  const auto *data = static_cast<const volatile uint8_t *>(maru_chunk_data(c));
  const uint8_t want = BlockByte(block);
  if (maru_chunk_size(c) != block_bytes) return false;
  // Touch every page, as an engine feeding the KV to its kernels would.
  for (uint64_t at = 0; at < block_bytes; at += 4096)
    if (data[at] != want) return false;
  return data[block_bytes - 1] == want;
}

std::string BlockPath(const std::string &dir, uint64_t block) {
  return dir + "/b" + std::to_string(block);
}

// The same client over Redis: one pipelined EXISTS of the request's blocks
// finds the cached prefix, one MGET brings it over, and each missing block
// is SET (Redis evicts by its own LRU at maxmemory).
int RunRedisClient(int port, const std::string &dir, const std::vector<TraceRequest> &trace,
                   uint64_t block_bytes, Shared *shared) {
  Result<RedisClient *> connected = RedisClient::Connect("127.0.0.1", port);
  if (!connected.ok()) return Fail(connected.status().message());
  std::unique_ptr<RedisClient> redis(*connected);
  std::vector<std::string> keys, values;
  std::vector<bool> found;
  std::vector<uint8_t> block(block_bytes);
  for (;;) {
    uint64_t i = shared->next_request.fetch_add(1);
    if (i >= trace.size()) break;
    const std::vector<uint64_t> &blocks = trace[i].blocks;
    keys.clear();
    for (uint64_t b : blocks) keys.push_back(BlockPath(dir, b));
    const int64_t asked = MonotonicNs();
    size_t hits = 0;
    Status s = redis->Exists(keys, &found);
    while (s.ok() && hits < keys.size() && found[hits]) ++hits;
    if (s.ok() && hits > 0) {
      std::vector<std::string> prefix(keys.begin(), keys.begin() + static_cast<ptrdiff_t>(hits));
      s = redis->MGet(prefix, &values, &found);
      // Evicted between the two calls: the prefix ends there.
      for (size_t j = 0; s.ok() && j < hits; ++j)
        if (!found[j]) hits = j;
    }
    if (!s.ok()) {
      shared->errors++;
      shared->done++;
      continue;
    }
    for (size_t j = 0; j < hits; ++j)
      if (values[j].size() != block_bytes ||
          values[j].find_first_not_of(static_cast<char>(BlockByte(blocks[j]))) != std::string::npos)
        shared->corrupt++;
    shared->prefix_us[i] =
        static_cast<uint32_t>(std::min<int64_t>((MonotonicNs() - asked) / 1000, UINT32_MAX));
    shared->blocks += blocks.size();
    shared->hits += hits;
    for (size_t j = hits; j < blocks.size(); ++j) {
      memset(block.data(), BlockByte(blocks[j]), block_bytes);
      if (redis->Set(keys[j], block.data(), block_bytes).ok())
        shared->stored++;
      else
        shared->not_stored++;  // e.g. maxmemory with nothing left to evict
    }
    shared->done++;
  }
  return 0;
}

// One client process: takes requests in trace order from a shared counter.
// `hints` (empty: none): after each request, the retention hints the
// engine gives (trace_hints.h), as a connector would.
int RunClient(const std::string &server, const std::string &dir,
              const std::vector<TraceRequest> &trace,
              const std::vector<std::vector<HintEvent>> &hints, uint64_t block_bytes,
              Shared *shared) {
  maru_t *m = Connect(server);
  if (!m) return 1;
  std::vector<std::string> names;
  std::vector<const char *> paths;
  std::vector<maru_chunk_t *> out;
  std::vector<int> hinted;
  const std::vector<HintEvent> kNoHints;
  for (;;) {
    uint64_t i = shared->next_request.fetch_add(1);
    if (i >= trace.size()) break;
    const std::vector<uint64_t> &blocks = trace[i].blocks;
    names.clear();
    paths.clear();
    for (uint64_t b : blocks) names.push_back(BlockPath(dir, b));
    for (auto &n : names) paths.push_back(n.c_str());
    out.resize(paths.size());
    size_t hits = 0;
    const int64_t asked = MonotonicNs();
    if (maru_lookup_prefix(m, paths.data(), paths.size(), out.data(), &hits)) {
      shared->errors++;
      shared->done++;
      continue;
    }
    // The cached prefix, read where it lies: no copy.
    for (size_t j = 0; j < hits; ++j)
      if (!HoldsBlock(out[j], blocks[j], block_bytes)) shared->corrupt++;
    shared->prefix_us[i] =
        static_cast<uint32_t>(std::min<int64_t>((MonotonicNs() - asked) / 1000, UINT32_MAX));
    for (size_t j = 0; j < hits; ++j) maru_release(out[j]);
    shared->blocks += blocks.size();
    shared->hits += hits;
    // Compute the rest (here: fill it) and store it as children of the prefix.
    for (size_t j = hits; j < blocks.size(); ++j) {
      maru_chunk_t *c;
      int rc = j == 0 ? maru_create(m, paths[j], block_bytes, &c)
                      : maru_create_child(m, paths[j], paths[j - 1], block_bytes, &c);
      if (rc == -ENOENT)
        rc = maru_create(m, paths[j], block_bytes, &c);  // prefix evicted meanwhile
      if (rc == -EEXIST) continue;
      if (rc == -ENOSPC) {
        // Everything left is being read (or written) by some client: this
        // block is not cached, as an engine would carry on without it.
        shared->not_stored++;
        continue;
      }
      if (rc) {
        shared->errors++;
        continue;
      }
      memset(maru_chunk_data(c), BlockByte(blocks[j]), block_bytes);
      if (maru_seal(c))
        shared->errors++;
      else
        shared->stored++;
      maru_release(c);
    }
    // One round trip per hint on a whole chain; blocks not stored answer ENOENT.
    for (const HintEvent &e : hints.empty() ? kNoHints : hints[i]) {
      names.clear();
      paths.clear();
      for (uint64_t b : trace[e.request].blocks) names.push_back(BlockPath(dir, b));
      for (auto &n : names) paths.push_back(n.c_str());
      hinted.resize(paths.size());
      if (maru_hint_batch(m, paths.data(), paths.size(), static_cast<int>(e.hint), hinted.data()) <
          0)
        shared->errors++;
    }
    shared->done++;
  }
  maru_disconnect(m);
  return 0;
}

}  // namespace

int RunReplay(int argc, char **argv) {
  ServerBench bench(
      "maru-bench replay --trace FILE [--server ADDRESS] [--clients N] [--bytes-per-token B] "
      "[--json]",
      "Replays a Mooncake-format trace: per request, one batched prefix lookup of its\n"
      "blocks, then the missing blocks are stored as children of their predecessors.\n"
      "Start the server on an empty pool with --high-watermark 1 --low-watermark 1 so\n"
      "that its capacity is the one the offline simulations use.");
  std::string trace_path, policy, hint_model;
  int64_t clients = 4, bytes_per_token = 128, limit = 0, capacity_blocks = 0, redis_port = 0;
  bool progress = false;
  Flags &flags = bench.flags();
  flags.String("trace", &trace_path, "trace file (JSON lines with hash_ids)");
  flags.Int("clients", &clients, "client processes");
  flags.Int("bytes-per-token", &bytes_per_token,
            "KV bytes per token; Llama-3.1-8B has 131072, the default scales it down 1024x");
  flags.Int("limit", &limit, "replay only the first N requests (0: all)");
  flags.Int("capacity-blocks", &capacity_blocks,
            "cache capacity for the simulations (default: from the pool)");
  flags.String("policy", &policy,
               "also simulate this eviction policy offline (the server's --eviction, to "
               "compare; see maru-bench policies)");
  flags.String("hints", &hint_model,
               "give retention hints derived from the trace: keep or keep+drop, then "
               "optionally :late-N (drops N requests after a conversation's last turn), :miss-PCT "
               "and :wrong-PCT (for the default --eviction frequency; the offline "
               "--policy gets the same hints)");
  flags.Bool("progress", &progress, "show progress on stderr while it runs");
  flags.Int("redis", &redis_port,
            "replay against redis-server on 127.0.0.1:PORT instead (needs --capacity-blocks)");
  bench.TakeDir("", "namespace directory for the blocks (default /maru-bench/replay-PID)");
  if (int rc = bench.Parse(argc, argv); rc >= 0) return rc;
  const std::string &server = bench.server();
  std::string dir = bench.dir();
  if (trace_path.empty()) return Fail("--trace is required");
  if (redis_port > 0 && !hint_model.empty()) return Fail("--hints is for maru-server, not --redis");
  if (redis_port > 0 && capacity_blocks <= 0)
    return Fail("--redis needs --capacity-blocks (what its maxmemory holds)");
  if (clients <= 0 || bytes_per_token <= 0 || bytes_per_token > (1 << 21) || limit < 0)
    return Fail("--clients must be positive and --bytes-per-token 1 to 2097152");
  if (dir.empty()) dir = "/maru-bench/replay-" + std::to_string(getpid());

  Result<std::vector<TraceRequest>> trace = ReadTrace(trace_path, static_cast<size_t>(limit));
  if (!trace.ok()) return Fail(trace.status().message());
  if (trace->empty()) return Fail(trace_path + " holds no requests");
  const uint64_t block_bytes = kTokensPerBlock * static_cast<uint64_t>(bytes_per_token);
  std::vector<std::vector<HintEvent>> hints;
  if (!hint_model.empty()) {
    Result<std::pair<std::string, HintModel>> parsed = ParseHintedName("live:" + hint_model);
    if (!parsed.ok()) return Fail("--hints: " + parsed.status().message());
    if (!parsed->second.keep) return Fail("--hints: keep or keep+drop first");
    hints = TraceHints(*trace, parsed->second);
    if (!policy.empty()) policy += ":" + hint_model;  // simulated with the same hints
  }

  // Clients fork before this process starts any RPC runtime.
  const size_t shared_bytes = sizeof(Shared) + trace->size() * sizeof(uint32_t);
  void *mem =
      mmap(nullptr, shared_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return Fail("cannot map the clients' shared counters");
  auto *shared = new (mem) Shared{};
  const int64_t start = MonotonicNs();
  std::vector<pid_t> pids;
  for (int64_t c = 0; c < clients; ++c) {
    fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0)
      _exit(redis_port > 0
                ? RunRedisClient(static_cast<int>(redis_port), dir, *trace, block_bytes, shared)
                : RunClient(server, dir, *trace, hints, block_bytes, shared));
    pids.push_back(pid);
  }
  // On a terminal the progress line redraws in place; in a log, where
  // carriage returns pile up, it is one line at the end.
  const bool redraw = progress && isatty(STDERR_FILENO);
  auto print_progress = [&] {
    const uint64_t b = shared->blocks, h = shared->hits, done = shared->done;
    fprintf(stderr, "%s  %" PRIu64 "/%zu requests, hit ratio %.3f, %.0f requests/s   ",
            redraw ? "\r" : "", done, trace->size(),
            b ? static_cast<double>(h) / static_cast<double>(b) : 0.0,
            static_cast<double>(done) / (static_cast<double>(MonotonicNs() - start) / 1e9));
  };
  bool client_failed = false;
  for (size_t left = pids.size(); left > 0;) {
    int status;
    pid_t pid = waitpid(-1, &status, redraw ? WNOHANG : 0);
    if (pid > 0) {
      client_failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
      --left;
      continue;
    }
    if (pid < 0) break;
    print_progress();
    usleep(250000);
  }
  if (progress) {
    if (!redraw) print_progress();
    fprintf(stderr, "\n");
  }
  const double seconds = static_cast<double>(MonotonicNs() - start) / 1e9;
  if (client_failed) return Fail("a client failed");

  if (capacity_blocks == 0) {
    maru_t *m;
    maru_pool_info_t info;
    if (int rc = maru_connect(server.c_str(), &m)) return Fail(maru_strerror(rc));
    int rc = maru_pool_info(m, &info);
    maru_disconnect(m);
    if (rc) return Fail(maru_strerror(rc));
    const uint64_t per_block = (block_bytes + info.unit - 1) / info.unit * info.unit;
    capacity_blocks = static_cast<int64_t>(info.total / per_block);
  }
  SimResult lru = SimulateLru(*trace, static_cast<uint64_t>(capacity_blocks));
  SimResult belady = SimulateBelady(*trace, static_cast<uint64_t>(capacity_blocks));
  PolicyFigures offline;
  if (!policy.empty()) {
    Result<PolicyFigures> f =
        SimulatePolicy(*trace, static_cast<uint64_t>(capacity_blocks), policy, Llama8BCost());
    if (!f.ok()) return Fail(f.status().message());
    offline = *f;
  }

  const uint64_t blocks = shared->blocks, hits = shared->hits;
  const double hit_ratio = blocks ? static_cast<double>(hits) / static_cast<double>(blocks) : 0;
  const double rps = static_cast<double>(trace->size()) / seconds;
  std::set<uint64_t> unique;
  for (const auto &r : *trace) unique.insert(r.blocks.begin(), r.blocks.end());
  printf("trace %s: %zu requests, %" PRIu64 " block references, %zu distinct blocks of %s\n",
         trace_path.c_str(), trace->size(), lru.blocks, unique.size(),
         FormatSize(block_bytes).c_str());
  printf("capacity %" PRId64 " blocks (%.1f%% of the distinct blocks), %" PRId64 " clients\n",
         capacity_blocks,
         100.0 * static_cast<double>(capacity_blocks) / static_cast<double>(unique.size()),
         clients);
  printf("  live hit ratio            %.4f\n", hit_ratio);
  printf("  offline LRU hit ratio     %.4f\n", lru.hit_ratio());
  if (!policy.empty()) printf("  offline %-17s %.4f\n", policy.c_str(), offline.block_hit());
  printf("  Belady (offline optimum)  %.4f\n", belady.hit_ratio());
  printf("  requests/s                %.1f   (%" PRIu64 " blocks stored, %" PRIu64
         " not stored for lack of evictable space, %" PRIu64 " errors)\n",
         rps, shared->stored.load(), shared->not_stored.load(), shared->errors.load());
  std::vector<double> prefix_us(shared->prefix_us, shared->prefix_us + trace->size());
  const double p50 = Quantile(prefix_us, 0.5), p99 = Quantile(prefix_us, 0.99);
  printf(
      "  cached prefix obtained    p50 %.0f us, p99 %.0f us (lookup, then every page read "
      "in place)\n",
      p50, p99);
  printf("  served without a copy     %s in %" PRIu64 " blocks, %" PRIu64 " wrong\n",
         FormatSize(hits * block_bytes).c_str(), hits, shared->corrupt.load());
  if (bench.json()) {
    Json j = {{"requests", trace->size()},
              {"block_references", blocks},
              {"block_bytes", block_bytes},
              {"capacity_blocks", capacity_blocks},
              {"clients", clients},
              {"hit_ratio", Rounded(hit_ratio, 5)},
              {"offline_lru_hit_ratio", Rounded(lru.hit_ratio(), 5)},
              {"belady_hit_ratio", Rounded(belady.hit_ratio(), 5)},
              {"requests_per_s", Rounded(rps, 2)},
              {"stored_blocks", shared->stored.load()},
              {"not_stored_blocks", shared->not_stored.load()},
              {"errors", shared->errors.load()},
              {"prefix_p50_us", Rounded(p50, 0)},
              {"prefix_p99_us", Rounded(p99, 0)},
              {"zero_copy_bytes", hits * block_bytes},
              {"wrong_blocks", shared->corrupt.load()}};
    if (!policy.empty()) {
      j["offline_policy"] = policy;
      j["offline_policy_hit_ratio"] = Rounded(offline.block_hit(), 5);
    }
    PrintJson(j);
  }
  return shared->errors.load() || shared->corrupt.load() ? 1 : 0;
}

}  // namespace maru::bench
