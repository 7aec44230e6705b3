// maru-bench share: one producer stores chunks, N consumer processes load
// each one, as prefill and decode instances share KV. The same run measures
// memcpy; the same workload runs over Redis (--redis PORT), what users who
// share by transfer run today.
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

#include "bench_common.h"
#include "json_output.h"
#include "redis_client.h"
#include "util/units.h"

namespace maru::bench {
namespace {

constexpr int kMaxRounds = 256;

struct Shared {
  std::atomic<int> published;  // rounds stored so far
  std::atomic<int> ready;      // consumers connected
  std::atomic<int> failed;
  std::atomic<int> done[kMaxRounds];  // consumers finished with round r
  std::atomic<int64_t> last_done_ns[kMaxRounds];
};

// Where the chunks live: the pool through libmaru_direct, or Redis.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual Status Store(const std::string &key, const std::vector<uint8_t> &data) = 0;
  virtual Status Load(const std::string &key, std::vector<uint8_t> *into) = 0;
  virtual void Remove(const std::string &key) = 0;
};

class MaruBackend : public Backend {
 public:
  explicit MaruBackend(maru_t *m) : m_(m) {}
  ~MaruBackend() override { maru_disconnect(m_); }
  Status Store(const std::string &key, const std::vector<uint8_t> &data) override {
    maru_chunk_t *c;
    if (int rc = maru_create(m_, key.c_str(), data.size(), &c)) return Err("create", rc);
    memcpy(maru_chunk_data(c), data.data(), data.size());
    int rc = maru_seal(c);
    maru_release(c);
    return rc ? Err("seal", rc) : Status::Ok();
  }
  Status Load(const std::string &key, std::vector<uint8_t> *into) override {
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
  Status Store(const std::string &key, const std::vector<uint8_t> &data) override {
    return r_->Set(key, data.data(), data.size());
  }
  Status Load(const std::string &key, std::vector<uint8_t> *into) override {
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
             int rounds, Shared *shared) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the producer
  Result<std::unique_ptr<Backend>> b = Connect(server, redis_port);
  if (!b.ok()) {
    shared->failed++;
    Bump(&shared->ready);
    return Fail(b.status().message());
  }
  std::vector<uint8_t> into = TouchedBuffer(size, 3);
  Bump(&shared->ready);
  for (int r = 0; r < rounds; ++r) {
    WaitFor(&shared->published,
            [&] { return shared->published.load() > r || shared->failed.load(); });
    if (shared->failed.load()) return 1;
    Status s = (*b)->Load(dir + "/r" + std::to_string(r), &into);
    if (!s.ok()) {
      shared->failed++;
      Bump(&shared->done[r]);
      return Fail(s.message());
    }
    int64_t now = MonotonicNs(), seen = shared->last_done_ns[r].load();
    while (now > seen && !shared->last_done_ns[r].compare_exchange_weak(seen, now)) {
    }
    Bump(&shared->done[r]);
  }
  return 0;
}

}  // namespace

int RunShare(int argc, char **argv) {
  std::string server = "unix:///run/maru/maru.sock", dir;
  uint64_t size = 32ull << 20;
  int64_t consumers = 1, rounds = 8, redis_port = 0;
  bool json = false;
  Flags flags("maru-bench share [--server ADDRESS | --redis PORT] [--consumers N] [--size SIZE]",
              "One producer stores chunks; N consumer processes each load every chunk (into\n"
              "their own buffer, as Redis's GET does). Rates are per byte moved; memcpy of the\n"
              "same size is measured in the same run.");
  flags.String("server", &server, "maru-server address");
  flags.Int("redis", &redis_port, "share through redis-server on 127.0.0.1:PORT instead");
  flags.Size("size", &size, "chunk size");
  flags.Int("consumers", &consumers, "consumer processes");
  flags.Int("rounds", &rounds, "chunks shared");
  flags.String("dir", &dir, "namespace directory (default /maru-bench/share-PID)");
  flags.Bool("json", &json, "end with one JSON line of the figures");
  if (int rc = ParseFlags(flags, argc, argv); rc >= 0) return rc;
  if (size == 0 || size > (16ull << 30) || consumers <= 0 || consumers > 64 || rounds <= 0 ||
      rounds > kMaxRounds)
    return Fail("need --size up to 16G, --consumers 1-64 and --rounds 1-256");
  if (dir.empty()) dir = "/maru-bench/share-" + std::to_string(getpid());

  void *mem =
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return Fail("cannot map shared counters");
  auto *shared = new (mem) Shared{};
  // Consumers fork before this process starts any RPC runtime.
  std::vector<pid_t> pids;
  for (int64_t i = 0; i < consumers; ++i) {
    fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0)
      _exit(Consumer(server, static_cast<int>(redis_port), dir, size, static_cast<int>(rounds),
                     shared));
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

  std::vector<uint8_t> src = TouchedBuffer(size, 1), dst = TouchedBuffer(size, 2);
  std::vector<double> memcpy_gbps, store_gbps, load_gbps;
  for (int r = 0; r < rounds; ++r) {
    int64_t t0 = MonotonicNs();
    memcpy(dst.data(), src.data(), size);
    memcpy_gbps.push_back(static_cast<double>(size) / static_cast<double>(MonotonicNs() - t0));
    const std::string key = dir + "/r" + std::to_string(r);
    t0 = MonotonicNs();
    Status s = (*b)->Store(key, src);
    const int64_t t1 = MonotonicNs();
    if (!s.ok()) return finish(Fail(s.message()));
    store_gbps.push_back(static_cast<double>(size) / static_cast<double>(t1 - t0));
    Bump(&shared->published);
    WaitFor(&shared->done[r], [&] { return shared->done[r].load() == consumers || lost(); });
    if (shared->done[r].load() != consumers || shared->failed.load())
      return finish(Fail("a consumer failed"));
    // All consumers' bytes over the time from publication to the last one.
    load_gbps.push_back(static_cast<double>(size * static_cast<uint64_t>(consumers)) /
                        static_cast<double>(shared->last_done_ns[r].load() - t1));
    (*b)->Remove(key);
  }
  int rc = finish(0);
  const double mc = Quantile(memcpy_gbps, 0.5), st = Quantile(store_gbps, 0.5),
               ld = Quantile(load_gbps, 0.5);
  const char *backend = redis_port > 0 ? "redis" : "maru";
  printf("%s: %" PRId64
         " consumer%s of %s chunks: store %.2f GB/s (%.2fx memcpy), load %.2f GB/s "
         "in all (%.2fx memcpy); memcpy %.2f GB/s\n",
         backend, consumers, consumers > 1 ? "s" : "", FormatSize(size).c_str(), st, st / mc, ld,
         ld / mc, mc);
  if (json)
    PrintJson({{"backend", backend},
               {"consumers", consumers},
               {"size", size},
               {"memcpy_gbps", Rounded(mc, 3)},
               {"store_gbps", Rounded(st, 3)},
               {"load_gbps", Rounded(ld, 3)}});
  return rc;
}

}  // namespace maru::bench
