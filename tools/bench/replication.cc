// What replicating the metadata through the pool's log costs, and what the
// alternative (a log in etcd) would: one process, the rounds interleaved so
// that whatever else the host does falls on all alike.
//   - a metadata write (MetaDb::Write of a seal's batch, RocksDB, no sync)
//     without and with the replication log: the leader's cost per write;
//   - the append alone, on a hw and on a flush pool region;
//   - a Put of the same bytes to etcd (a member it starts on loopback,
//     through its JSON gateway over one kept-alive connection).
//
//   bench_replication DIR [WRITES] [ROUNDS]   (DIR: a scratch directory)
//   MARU_BENCH_NO_LOG=1 bench_replication ...  a control: the log not attached
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ha/op_log.h"
#include "meta/meta_db.h"

namespace {

using maru::Coherence;
using maru::MetaDb;
using maru::OpLog;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The batch a seal writes: the chunk's inode (a long LMCache-like name, two
// extents, a checksum) and the counters.
void SealBatch(uint64_t ino, MetaDb::Batch *b) {
  maru::schema::Inode inode;
  inode.set_ino(ino);
  inode.set_parent(2);
  inode.set_name("llama-8b@1@0@" + std::to_string(ino * 2654435761u) + "deadbeefcafe@bf16.data");
  inode.set_mode(0100644);
  maru::schema::Version *v = inode.mutable_current();
  v->set_gen(ino);
  v->set_size(32u << 20);
  v->set_checksum_type(1);
  v->set_checksum(ino * 0x9e3779b97f4a7c15ull);
  for (int e = 0; e < 2; ++e) {
    maru::schema::Extent *x = v->add_extents();
    x->set_offset((ino * 2 + e) << 24);
    x->set_length(16u << 20);
  }
  b->PutInode(inode);
  maru::schema::Counters counters;
  counters.set_ino_limit(ino + 1);
  counters.set_gen_limit(ino + 1);
  b->PutCounters(counters);
}

// A mapping of a /dev/shm file, for the log's region.
struct Region {
  explicit Region(uint64_t bytes) : bytes(bytes) {
    path = "/dev/shm/bench-oplog-" + std::to_string(getpid()) + "-" + std::to_string(NowNs());
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) std::exit(1);
    base = static_cast<uint8_t *>(
        mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0));
    close(fd);
    if (base == MAP_FAILED) std::exit(1);
  }
  ~Region() {
    munmap(base, bytes);
    unlink(path.c_str());
  }
  std::string path;
  uint64_t bytes;
  uint8_t *base;
};

std::string Base64(const std::string &in) {
  static const char *k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t n = uint8_t(in[i]) << 16 | uint8_t(in[i + 1]) << 8 | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += k[(n >> s) & 63];
  }
  if (i < in.size()) {
    uint32_t n = uint8_t(in[i]) << 16 | (i + 1 < in.size() ? uint8_t(in[i + 1]) << 8 : 0);
    out += k[(n >> 18) & 63];
    out += k[(n >> 12) & 63];
    out += i + 1 < in.size() ? k[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// An etcd member on loopback, stopped (by its pid) at the end.
struct Etcd {
  Etcd(const std::string &dir, int port) : port(port) {
    const std::string client = "http://127.0.0.1:" + std::to_string(port);
    const std::string peer = "http://127.0.0.1:" + std::to_string(port + 1);
    pid = fork();
    if (pid == 0) {
      int null = open("/dev/null", O_WRONLY);
      dup2(null, 1);
      dup2(null, 2);
      execl("/usr/bin/etcd", "etcd", "--data-dir", (dir + "/etcd").c_str(), "--listen-client-urls",
            client.c_str(), "--advertise-client-urls", client.c_str(), "--listen-peer-urls",
            peer.c_str(), "--initial-advertise-peer-urls", peer.c_str(), "--initial-cluster",
            ("default=" + peer).c_str(), nullptr);
      _exit(127);
    }
  }
  ~Etcd() {
    if (pid > 0) {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
    }
  }
  pid_t pid = -1;
  int port;
};

// One kept-alive HTTP connection to etcd's JSON gateway.
class EtcdConnection {
 public:
  bool Connect(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return connect(fd_, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0;
  }
  ~EtcdConnection() {
    if (fd_ >= 0) close(fd_);
  }
  // A Put; false if etcd did not answer 200.
  bool Put(const std::string &key, const std::string &value) {
    const std::string body =
        "{\"key\":\"" + Base64(key) + "\",\"value\":\"" + Base64(value) + "\"}";
    const std::string req =
        "POST /v3/kv/put HTTP/1.1\r\nHost: etcd\r\nContent-Type: "
        "application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    if (write(fd_, req.data(), req.size()) != static_cast<ssize_t>(req.size())) return false;
    std::string in;
    char buf[4096];
    size_t header_end = std::string::npos, length = 0;
    while (header_end == std::string::npos || in.size() < header_end + 4 + length) {
      ssize_t n = read(fd_, buf, sizeof buf);
      if (n <= 0) return false;
      in.append(buf, static_cast<size_t>(n));
      if (header_end == std::string::npos &&
          (header_end = in.find("\r\n\r\n")) != std::string::npos) {
        size_t at = in.find("Content-Length: ");
        if (at == std::string::npos || at > header_end) return false;
        length = std::strtoull(in.c_str() + at + 16, nullptr, 10);
      }
    }
    return in.compare(0, 12, "HTTP/1.1 200") == 0;
  }

 private:
  int fd_ = -1;
};

std::unique_ptr<MetaDb> OpenDb(const std::string &dir) {
  maru::Result<std::unique_ptr<MetaDb>> db = MetaDb::Open(dir, false);
  if (!db.ok()) {
    fprintf(stderr, "%s\n", db.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*db);
}

}  // namespace

int main(int argc, char **argv) {
  if (argc < 2) return fprintf(stderr, "usage: bench_replication DIR [WRITES] [ROUNDS]\n"), 2;
  const std::string dir = argv[1];
  const int writes = argc > 2 ? atoi(argv[2]) : 2000;
  const int rounds = argc > 3 ? atoi(argv[3]) : 5;
  Region hw_region(64 << 20), flush_region(64 << 20);
  maru::Result<OpLog> hw_log = OpLog::Attach(hw_region.base, hw_region.bytes, Coherence::kHw);
  maru::Result<OpLog> flush_log =
      OpLog::Attach(flush_region.base, flush_region.bytes, Coherence::kFlush);
  if (!hw_log.ok() || !flush_log.ok()) return 1;
  std::unique_ptr<MetaDb> plain = OpenDb(dir + "/plain"), logged = OpenDb(dir + "/logged");
  Region log_region(64 << 20);
  maru::Result<OpLog> leader_log = OpLog::Attach(log_region.base, log_region.bytes, Coherence::kHw);
  if (!leader_log.ok() || (getenv("MARU_BENCH_NO_LOG") == nullptr &&
                           !logged->AttachLog(&*leader_log, 1, [] { return true; }).ok()))
    return 1;
  if (!hw_log->StartWriter({}, 1, nullptr).ok() || !flush_log->StartWriter({}, 1, nullptr).ok())
    return 1;
  Etcd etcd(dir, 23790 + getpid() % 1000 * 2);
  EtcdConnection conn;
  // Wait for the member to serve (a Put that succeeds), at most 20 s.
  bool up = false;
  for (int i = 0; i < 400 && !up; ++i) {
    EtcdConnection probe;
    up = probe.Connect(etcd.port) && probe.Put("probe", "x");
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!up || !conn.Connect(etcd.port)) return fprintf(stderr, "etcd did not start\n"), 1;

  MetaDb::Batch sample;
  SealBatch(1, &sample);
  std::vector<double> plain_ns, logged_ns, hw_ns, flush_ns, etcd_ns;
  uint64_t ino = 100;
  std::string bytes;
  for (int r = 0; r < rounds; ++r) {
    // The two databases' writes alternate, one each, so that neither gets
    // a quieter moment of the host.
    for (int i = 0; i < writes; ++i) {
      MetaDb::Batch a, b;
      SealBatch(ino, &a);
      SealBatch(ino++, &b);
      MetaDb *first = i % 2 ? plain.get() : logged.get();
      MetaDb *second = i % 2 ? logged.get() : plain.get();
      const int64_t t0 = NowNs();
      if (!first->Write(a).ok()) return 1;
      const int64_t t1 = NowNs();
      if (!second->Write(b).ok()) return 1;
      const int64_t t2 = NowNs();
      (i % 2 ? plain_ns : logged_ns).push_back(double(t1 - t0));
      (i % 2 ? logged_ns : plain_ns).push_back(double(t2 - t1));
    }
    int64_t t0;
    // The bytes an append carries: a seal's batch with its log position.
    bytes.assign(200, 'x');
    for (auto [log, out] : {std::pair{&*hw_log, &hw_ns}, std::pair{&*flush_log, &flush_ns}}) {
      t0 = NowNs();
      for (int i = 0; i < writes; ++i)
        if (!log->Append(bytes).ok()) return 1;
      out->push_back(double(NowNs() - t0) / writes);
    }
    const int etcd_writes = std::max(1, writes / 10);
    t0 = NowNs();
    for (int i = 0; i < etcd_writes; ++i)
      if (!conn.Put("/maru/log/" + std::to_string(ino + i), bytes)) return 1;
    etcd_ns.push_back(double(NowNs() - t0) / etcd_writes);
  }
  const double p = Median(plain_ns), l = Median(logged_ns), h = Median(hw_ns), f = Median(flush_ns),
               e = Median(etcd_ns);
  printf("metadata write (RocksDB, no sync), no log    %10.2f us\n", p / 1e3);
  printf("metadata write with the pool log (hw)        %10.2f us   throughput %.3fx without\n",
         l / 1e3, p / l);
  printf("pool log append, %zu B record, hw            %10.3f us\n", bytes.size(), h / 1e3);
  printf("pool log append, %zu B record, flush         %10.3f us\n", bytes.size(), f / 1e3);
  printf(
      "etcd Put of the same bytes (loopback, 1 member) %7.1f us   %.0fx the hw append, "
      "%.0fx the flush append\n",
      e / 1e3, e / h, e / f);
  printf(
      "(metadata writes: medians of %d each; the rest: medians of %d rounds of %d appends "
      "and %d etcd Puts)\n",
      rounds * writes, rounds, writes, std::max(1, writes / 10));
  return 0;
}
