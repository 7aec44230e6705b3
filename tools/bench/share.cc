// maru-bench share: one producer stores chunks, N consumer processes load
// each one, as prefill and decode instances share KV; the same workload runs
// over Redis (--redis PORT), what users who share by transfer run today.
//
// Each is judged against a plain copy made exactly like it, in the same
// round: the store against the best plain copy (memcpy, or the library's
// streaming copy) of the same source into memory that is not cached, as a
// fresh extent is not; the N loads, all at once, against N memcpys at once
// from memory that is not cached (the chunk is evicted from the caches
// after it is stored, and so is the copies' source) into the same buffers
// of the same consumers. Loads and their copies take turns going first.
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <functional>
#include <memory>

#include "bench/common.h"
#include "bench/redis_client.h"
#include "bench/server_bench.h"
#include "common/json_output.h"
#include "util/stream_copy.h"
#include "util/units.h"

namespace maru::bench {
namespace {

constexpr int kMaxRounds = 256;

struct Shared {
  std::atomic<int> published;  // rounds stored so far: their loads may start
  std::atomic<int> copies;     // rounds whose baseline copies may start
  std::atomic<int> ready;      // consumers connected
  std::atomic<int> failed;
  std::atomic<int> done[kMaxRounds];    // consumers finished loading round r
  std::atomic<int> copied[kMaxRounds];  // consumers finished round r's copy
  std::atomic<int64_t> last_done_ns[kMaxRounds], last_copied_ns[kMaxRounds];
};

// Round r's load goes first in even rounds, its baseline copy in odd ones.
bool LoadFirst(int r) {
  return r % 2 == 0;
}

// Raises `*at` to `ns` if it is later.
void NoteLatest(std::atomic<int64_t> *at, int64_t ns) {
  int64_t seen = at->load();
  while (ns > seen && !at->compare_exchange_weak(seen, ns)) {
  }
}

// Where the chunks live: the pool through libmaru_direct, or Redis.
class Backend {
 public:
  virtual ~Backend() = default;
  // Stores `data`; *ns is the time it took, not counting the eviction of
  // the stored bytes from this CPU's caches (as if stored long ago).
  virtual Status Store(const std::string &key, const AlignedBuffer &data, int64_t *ns) = 0;
  virtual Status Load(const std::string &key, AlignedBuffer *into) = 0;
  virtual void Remove(const std::string &key) = 0;
};

class MaruBackend : public Backend {
 public:
  explicit MaruBackend(maru_t *m) : m_(m) {}
  ~MaruBackend() override { maru_disconnect(m_); }
  Status Store(const std::string &key, const AlignedBuffer &data, int64_t *ns) override {
    const int64_t t0 = MonotonicNs();
    maru_chunk_t *c;
    if (int rc = maru_create(m_, key.c_str(), data.size(), &c)) return Err("create", rc);
    // The library's copy, as the header advises for large chunks.
    int rc = maru_write_from(c, data.data(), 0, data.size());
    if (rc == 0) rc = maru_seal(c);
    const int64_t t1 = MonotonicNs();
    if (rc == 0) Uncache(maru_chunk_data(c), data.size());
    const int64_t t2 = MonotonicNs();
    maru_release(c);
    *ns = (t1 - t0) + (MonotonicNs() - t2);
    return rc ? Err("store", rc) : Status::Ok();
  }
  Status Load(const std::string &key, AlignedBuffer *into) override {
    maru_chunk_t *c;
    if (int rc = maru_open(m_, key.c_str(), &c)) return Err("open", rc);
    int rc =
        maru_read_into(c, into->data(), 0, std::min<uint64_t>(into->size(), maru_chunk_size(c)));
    maru_release(c);
    return rc ? Err("read", rc) : Status::Ok();
  }
  void Remove(const std::string &key) override { maru_unlink(m_, key.c_str()); }

 private:
  static Status Err(const char *what, int rc) {
    return Status::Error(-rc, std::string(what) + ": " + maru_strerror(rc));
  }
  maru_t *m_;
};

class RedisBackend : public Backend {
 public:
  explicit RedisBackend(RedisClient *r) : r_(r) {}
  Status Store(const std::string &key, const AlignedBuffer &data, int64_t *ns) override {
    const int64_t t0 = MonotonicNs();
    Status s = r_->Set(key, data.data(), data.size());
    *ns = MonotonicNs() - t0;
    return s;
  }
  Status Load(const std::string &key, AlignedBuffer *into) override {
    MARU_RETURN_IF_ERROR(r_->Get(key, &value_));
    // A GET hands the bytes to the client; they then sit in its own buffer.
    memcpy(into->data(), value_.data(), std::min(into->size(), value_.size()));
    return Status::Ok();
  }
  void Remove(const std::string &key) override { r_->Command({"DEL", key}); }

 private:
  std::unique_ptr<RedisClient> r_;
  std::string value_;
};

Result<std::unique_ptr<Backend>> Connect(const std::string &server, int redis_port) {
  if (redis_port > 0) {
    Result<RedisClient *> r = RedisClient::Connect("127.0.0.1", redis_port);
    if (!r.ok()) return r.status();
    return std::unique_ptr<Backend>(new RedisBackend(*r));
  }
  maru_t *m;
  if (int rc = maru_connect(server.c_str(), &m))
    return Status::Error(-rc, "connect: " + std::string(maru_strerror(rc)));
  return std::unique_ptr<Backend>(new MaruBackend(m));
}

// Waiting on a counter in the shared mapping: a futex, so that waiting
// processes leave the CPUs to the ones measured.
void WaitFor(std::atomic<int> *counter, const std::function<bool()> &done) {
  while (!done()) {
    const int seen = counter->load();
    if (done()) return;
    timespec tick{0, 50 * 1000 * 1000};  // and look around now and then
    syscall(SYS_futex, reinterpret_cast<int *>(counter), FUTEX_WAIT, seen, &tick, nullptr, 0);
  }
}

void Bump(std::atomic<int> *counter) {
  counter->fetch_add(1);
  syscall(SYS_futex, reinterpret_cast<int *>(counter), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// True once any of `pids` has failed: killed, or exited non-zero. (One that
// exited 0 has loaded every chunk; it is reaped and forgotten.)
bool AnyFailed(std::vector<pid_t> *pids) {
  int status;
  for (pid_t &p : *pids) {
    if (p <= 0 || waitpid(p, &status, WNOHANG) != p) continue;
    p = -1;
    if (WIFSIGNALED(status))
      Fail("a consumer was killed by signal " + std::to_string(WTERMSIG(status)));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return true;
  }
  return false;
}

int Consumer(const std::string &server, int redis_port, const std::string &dir, uint64_t size,
             int rounds, Shared *shared, const uint8_t *ref) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the producer
  Result<std::unique_ptr<Backend>> b = Connect(server, redis_port);
  if (!b.ok()) {
    shared->failed++;
    Bump(&shared->ready);
    return Fail(b.status().message());
  }
  AlignedBuffer into(size, 3);
  Bump(&shared->ready);
  auto load = [&](int r) {
    WaitFor(&shared->published,
            [&] { return shared->published.load() > r || shared->failed.load(); });
    if (shared->failed.load()) return false;
    Status s = (*b)->Load(dir + "/r" + std::to_string(r), &into);
    if (!s.ok()) {
      shared->failed++;
      Bump(&shared->done[r]);
      return Fail(s.message()), false;
    }
    NoteLatest(&shared->last_done_ns[r], MonotonicNs());
    Bump(&shared->done[r]);
    return true;
  };
  // The baseline: the same bytes, out of the cache like the chunk, into
  // the same buffer.
  auto copy = [&](int r) {
    WaitFor(&shared->copies, [&] { return shared->copies.load() > r || shared->failed.load(); });
    if (shared->failed.load()) return false;
    memcpy(into.data(), ref, size);
    NoteLatest(&shared->last_copied_ns[r], MonotonicNs());
    Bump(&shared->copied[r]);
    return true;
  };
  for (int r = 0; r < rounds; ++r) {
    const bool ok = LoadFirst(r) ? load(r) && copy(r) : copy(r) && load(r);
    if (!ok) return 1;
  }
  return 0;
}

// The figures of one run, per round; ratios are taken round by round.
struct Samples {
  std::vector<double> memcpy_hot, store_base, store, load_base, load, store_ratio, load_ratio;
};

double Gbps(uint64_t bytes, int64_t ns) {
  return static_cast<double>(bytes) / static_cast<double>(std::max<int64_t>(ns, 1));
}

// Times `f` in ns.
template <typename F>
int64_t Timed(F f) {
  const int64_t t0 = MonotonicNs();
  f();
  return MonotonicNs() - t0;
}

}  // namespace

int RunShare(int argc, char **argv) {
  ServerBench bench(
      "maru-bench share [--server ADDRESS | --redis PORT] [--consumers N] [--size SIZE]",
      "One producer stores chunks; N consumer processes each load every chunk (into\n"
      "their own buffer, as Redis's GET does). Rates are per byte moved. Each store is\n"
      "timed beside a plain copy of its bytes into memory out of the cache (as a fresh\n"
      "extent is), and the N loads beside N memcpys at once from memory out of the\n"
      "cache into the same buffers; ratios are medians of the rounds' ratios.");
  uint64_t size = 32ull << 20;
  int64_t consumers = 1, rounds = 8, redis_port = 0;
  Flags &flags = bench.flags();
  flags.Int("redis", &redis_port, "share through redis-server on 127.0.0.1:PORT instead");
  flags.Size("size", &size, "chunk size");
  flags.Int("consumers", &consumers, "consumer processes");
  flags.Int("rounds", &rounds, "chunks shared");
  bench.TakeDir("", "namespace directory (default /maru-bench/share-PID)");
  if (int rc = bench.Parse(argc, argv); rc >= 0) return rc;
  const std::string &server = bench.server();
  std::string dir = bench.dir();
  if (size == 0 || size > (16ull << 30) || consumers <= 0 || consumers > 64 || rounds <= 0 ||
      rounds > kMaxRounds)
    return Fail("need --size up to 16G, --consumers 1-64 and --rounds 1-256");
  if (dir.empty()) dir = "/maru-bench/share-" + std::to_string(getpid());

  void *mem =
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return Fail("cannot map shared counters");
  auto *shared = new (mem) Shared{};
  // The loads' baseline source, shared with the consumers.
  void *ref_mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (ref_mem == MAP_FAILED) return Fail("cannot map the copies' source");
  auto *ref = static_cast<uint8_t *>(ref_mem);
  memset(ref, 5, size);
  // Consumers fork before this process starts any RPC runtime.
  std::vector<pid_t> pids;
  for (int64_t i = 0; i < consumers; ++i) {
    fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0)
      _exit(Consumer(server, static_cast<int>(redis_port), dir, size, static_cast<int>(rounds),
                     shared, ref));
    if (pid < 0) break;
    pids.push_back(pid);
  }
  auto finish = [&](int rc) {
    if (rc) {
      shared->failed++;
      Bump(&shared->published);  // wakes consumers to see it
    }
    for (pid_t p : pids)
      if (p > 0) waitpid(p, nullptr, 0);
    return rc;
  };
  if (pids.size() != static_cast<size_t>(consumers))
    return finish(Fail("cannot start the consumer processes"));
  // A consumer that dies (killed, out of memory) fails the run, never hangs it.
  auto lost = [&] { return shared->failed.load() > 0 || AnyFailed(&pids); };
  Result<std::unique_ptr<Backend>> b = Connect(server, static_cast<int>(redis_port));
  if (!b.ok()) return finish(Fail(b.status().message()));
  WaitFor(&shared->ready, [&] { return shared->ready.load() == consumers || lost(); });
  if (shared->ready.load() != consumers || shared->failed.load())
    return finish(Fail("a consumer could not connect"));

  AlignedBuffer src(size, 1), hot(size, 2), cold(size, 4);
  Samples x;
  for (int r = 0; r < rounds; ++r) {
    // The store's baselines, beside it: memcpy between cached buffers (what
    // a loop of memcpy measures), and the best plain copy of the same
    // source into memory out of the cache, as the chunk's extent is.
    // Two untimed copies first: here one did not make the buffers cached
    // again after the round's other 100+ MiB of traffic (3.3 ms, then 2.3).
    for (int i = 0; i < 2; ++i) {
      memcpy(hot.data(), src.data(), size);
      Used(hot.data());
    }
    x.memcpy_hot.push_back(Gbps(size, Timed([&] {
                                  memcpy(hot.data(), src.data(), size);
                                  Used(hot.data());
                                })));
    Uncache(cold.data(), size);
    const int64_t plain = Timed([&] {
      memcpy(cold.data(), src.data(), size);
      Used(cold.data());
    });
    Uncache(cold.data(), size);
    const int64_t streamed = Timed([&] { StreamCopy(cold.data(), src.data(), size); });
    x.store_base.push_back(Gbps(size, std::min(plain, streamed)));
    const std::string key = dir + "/r" + std::to_string(r);
    int64_t ns = 0;
    Status s = (*b)->Store(key, src, &ns);
    if (!s.ok()) return finish(Fail(s.message()));
    x.store.push_back(Gbps(size, ns));
    x.store_ratio.push_back(x.store.back() / x.store_base.back());
    // The loads' baseline source: the same bytes, out of the cache too.
    memcpy(ref, src.data(), size);
    Uncache(ref, size);
    // All consumers' bytes over the time from the go to the last one.
    auto phase = [&](std::atomic<int> *go, std::atomic<int> *finished,
                     std::atomic<int64_t> *last) -> double {
      const int64_t t0 = MonotonicNs();
      Bump(go);
      WaitFor(finished, [&] { return finished->load() == consumers || lost(); });
      if (finished->load() != consumers || shared->failed.load()) return -1;
      return Gbps(size * static_cast<uint64_t>(consumers), last->load() - t0);
    };
    auto loads = [&] {
      return phase(&shared->published, &shared->done[r], &shared->last_done_ns[r]);
    };
    auto copies = [&] {
      return phase(&shared->copies, &shared->copied[r], &shared->last_copied_ns[r]);
    };
    double load = 0, base = 0;
    if (LoadFirst(r)) {
      load = loads();
      base = load < 0 ? -1 : copies();
    } else {
      base = copies();
      load = base < 0 ? -1 : loads();
    }
    if (load < 0 || base < 0) return finish(Fail("a consumer failed"));
    x.load.push_back(load);
    x.load_base.push_back(base);
    x.load_ratio.push_back(load / base);
    (*b)->Remove(key);
  }
  int rc = finish(0);
  const double mc = Quantile(x.memcpy_hot, 0.5), st = Quantile(x.store, 0.5),
               ld = Quantile(x.load, 0.5), st_base = Quantile(x.store_base, 0.5),
               ld_base = Quantile(x.load_base, 0.5), st_ratio = Quantile(x.store_ratio, 0.5),
               ld_ratio = Quantile(x.load_ratio, 0.5);
  const char *backend = redis_port > 0 ? "redis" : "maru";
  printf("%s: %" PRId64
         " consumer%s of %s chunks, medians: store %.2f GB/s (%.2fx its copy, %.2f GB/s), load "
         "%.2f GB/s in all (%.2fx %" PRId64
         " copies at once, %.2f GB/s); memcpy between "
         "cached buffers %.2f GB/s\n",
         backend, consumers, consumers > 1 ? "s" : "", FormatSize(size).c_str(), st, st_ratio,
         st_base, ld, ld_ratio, consumers, ld_base, mc);
  if (bench.json())
    PrintJson({{"backend", backend},
               {"consumers", consumers},
               {"size", size},
               {"memcpy_gbps", Rounded(mc, 3)},
               {"store_gbps", Rounded(st, 3)},
               {"load_gbps", Rounded(ld, 3)},
               {"store_copy_gbps", Rounded(st_base, 3)},
               {"load_copy_gbps", Rounded(ld_base, 3)},
               {"store_vs_copy", Rounded(st_ratio, 3)},
               {"load_vs_copy", Rounded(ld_ratio, 3)}});
  return rc;
}

}  // namespace maru::bench
