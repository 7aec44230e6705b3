#include "harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

namespace maru_test {

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

std::string UniqueName(const std::string &prefix) {
  static std::atomic<int> counter{0};
  return prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

TempDir::TempDir() {
  std::string tmpl = "/tmp/maru-test-XXXXXX";
  if (!mkdtemp(tmpl.data())) abort();
  path_ = tmpl;
  chmod(path_.c_str(), 0755);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

// Pools still to remove if the test is stopped by a signal (meson's timeout
// sends SIGTERM): destructors do not run then, and a pool is hundreds of MiB
// of /dev/shm. Fixed slots, so the handler only reads memory and unlinks.
namespace {

constexpr int kPoolSlots = 64;
char pool_slots[kPoolSlots][128];
std::atomic<bool> pool_slot_used[kPoolSlots];

void RemovePoolsAndDie(int sig) {
  for (int i = 0; i < kPoolSlots; ++i)
    if (pool_slot_used[i].load()) unlink(pool_slots[i]);
  signal(sig, SIG_DFL);
  raise(sig);
}

void RemoveOnSignal(const std::string &path) {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) signal(sig, RemovePoolsAndDie);
  });
  if (path.size() >= sizeof(pool_slots[0])) return;
  for (int i = 0; i < kPoolSlots; ++i) {
    if (pool_slot_used[i].load()) continue;
    memcpy(pool_slots[i], path.c_str(), path.size() + 1);
    pool_slot_used[i].store(true);
    return;
  }
}

void ForgetOnSignal(const std::string &path) {
  for (int i = 0; i < kPoolSlots; ++i)
    if (pool_slot_used[i].load() && path == pool_slots[i]) pool_slot_used[i].store(false);
}

}  // namespace

TestPool::TestPool(uint64_t size, uint64_t unit, const std::string &coherence,
                   const std::string &more) {
  path_ = "/dev/shm/" + UniqueName("maru-test") + ".pool";
  RemoveOnSignal(path_);
  RemoveOnSignal(path_ + ".index");  // the server's shared-memory index, after a kill -9
  std::string out;
  int rc = Run(MaructlBinary() + " mkpool " + path_ + " --size " + std::to_string(size) +
                   " --unit " + std::to_string(unit) + " --mode 666" +
                   (coherence.empty() ? "" : " --coherence " + coherence) + " " + more,
               &out);
  if (rc != 0) {
    fprintf(stderr, "mkpool failed: %s\n", out.c_str());
    abort();
  }
}

TestPool::~TestPool() {
  unlink(path_.c_str());
  ForgetOnSignal(path_);
  for (const char *suffix : {".index", ".index.new"}) unlink((path_ + suffix).c_str());
  ForgetOnSignal(path_ + ".index");
}

std::string BinDir(const std::string &name) {
  return std::string(MARU_BUILD_ROOT) + "/" + name;
}
std::string SourcePath(const std::string &name) {
  return std::string(MARU_SOURCE_ROOT) + "/" + name;
}
std::string ServerBinary() {
  return BinDir("src/meta/maru-server");
}
std::string MaructlBinary() {
  return BinDir("tools/maructl");
}
std::string FuseBinary() {
  return BinDir("src/fs/maru-fuse");
}

bool WaitFor(const std::function<bool()> &condition, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return condition();
}

pid_t Fork(const std::function<int()> &body) {
  fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) _exit(body());
  return pid;
}

int Wait(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

bool Freeze(pid_t pid) {
  kill(pid, SIGSTOP);
  return WaitFor(
      [&] {
        std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
        std::string line;
        std::getline(stat, line);
        size_t close = line.rfind(')');
        return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'T';
      },
      5000);
}

int Run(const std::string &command, std::string *output) {
  std::string full = command + " 2>&1";
  FILE *p = popen(full.c_str(), "r");
  if (!p) return -1;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int status = pclose(p);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

Server::Server(const std::string &pool, std::vector<std::string> extra_args)
    : pool_(pool), extra_(std::move(extra_args)) {
  socket_ = dir_.path() + "/maru.sock";
  db_ = dir_.path() + "/db";
  log_ = dir_.path() + "/server.log";
}

Server::~Server() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    if (!WaitFor([&] { return waitpid(pid_, nullptr, WNOHANG) == pid_; }, 5000)) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
}

static bool Answers(const std::string &path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool ok = connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

static std::vector<std::string> ServerArgs(const std::string &pool, const std::string &db,
                                           const std::string &socket,
                                           const std::vector<std::string> &extra) {
  std::vector<std::string> args = {ServerBinary(), "--pool",          pool, "--db", db,
                                   "--listen",     "unix://" + socket};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

static void Exec(const std::vector<std::string> &args) {
  std::vector<char *> argv;
  for (const auto &a : args) argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  _exit(127);
}

// `args` run on `host`, or on the machine itself when there is none.
static std::vector<std::string> On(const NetNs *host, std::vector<std::string> args) {
  if (!host) return args;
  std::vector<std::string> on = host->ExecArgs();
  on.insert(on.end(), args.begin(), args.end());
  return on;
}

// Starts `args` with its output in `log`; waits until `ready` holds.
// Returns the pid, or -1 if the process exited or never got ready.
static pid_t StartLogged(const std::vector<std::string> &args, const std::string &log,
                         const std::function<bool()> &ready, uint64_t nofile = 0) {
  pid_t pid = fork();
  if (pid == 0) {
    // If the test dies, so does what it started.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (nofile) {
      rlimit files{nofile, nofile};
      setrlimit(RLIMIT_NOFILE, &files);
    }
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 2);
    dup2(fd, 1);
    Exec(args);
  }
  bool exited = false;
  bool up = WaitFor(
      [&] {
        if (waitpid(pid, nullptr, WNOHANG) == pid) return exited = true;
        return ready();
      },
      20000);
  if (exited) return -1;
  if (!up) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return -1;
  }
  return pid;
}

bool Server::Start() {
  pid_ = StartLogged(
      On(host_, ServerArgs(pool_, db_, socket_, extra_)), log_, [&] { return Answers(socket_); },
      nofile_);
  if (pid_ < 0) fprintf(stderr, "maru-server did not start:\n%s\n", log().c_str());
  return pid_ > 0;
}

bool Server::StartWhen(const std::function<bool()> &ready) {
  pid_ = StartLogged(On(host_, ServerArgs(pool_, db_, socket_, extra_)), log_, ready, nofile_);
  if (pid_ < 0) fprintf(stderr, "maru-server did not start:\n%s\n", log().c_str());
  return pid_ > 0;
}

bool Server::Serves() const {
  return Answers(socket_);
}

int Server::Exited() {
  if (pid_ <= 0) return -1;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return -1;
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void Server::Thaw() {
  if (pid_ > 0) kill(pid_, SIGCONT);
}

void Server::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void Server::Kill9() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::string Server::log() const {
  std::ifstream in(log_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int Server::RunToExit(std::string *output) {
  std::string cmd;
  for (const auto &a : On(host_, ServerArgs(pool_, db_, socket_, extra_))) cmd += "'" + a + "' ";
  return Run("timeout 20 " + cmd, output);
}

namespace {
// CRC32C (Castagnoli, reflected), bit by bit: the tests link no Maru code
// beyond the C API.
uint32_t Crc32c(const uint8_t *p, size_t n) {
  uint32_t crc = ~0u;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1)));
  }
  return ~crc;
}
}  // namespace

namespace {

// Rewrites a fresh hw pool's superblock as a maructl of an older layout
// wrote it: a header that ends (CRC included) at `header`, the CRC right
// before that end, nothing after it.
bool RewriteSuperblockHeader(const std::string &pool, uint32_t header) {
  // The layout of src/alloc/superblock.cc: the header's size at 12, the
  // coherence word at 164, the regions from 172, the CRC at 212.
  constexpr size_t kHeaderBytesAt = 12, kCoherenceAt = 164, kControlAt = 172, kCrcAt = 212,
                   kNow = 216;
  int fd = open(pool.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  uint8_t b[kNow];
  bool ok = pread(fd, b, sizeof(b), 0) == static_cast<ssize_t>(sizeof(b));
  uint32_t now = 0, coherence = 1, crc = 0;
  memcpy(&now, b + kHeaderBytesAt, 4);
  memcpy(&coherence, b + kCoherenceAt, 4);
  memcpy(&crc, b + kCrcAt, 4);
  uint64_t regions[4];  // index and log: none
  memcpy(regions, b + kControlAt + 8, sizeof(regions));
  ok = ok && now == kNow && coherence == 0 && crc == Crc32c(b, kCrcAt) &&
       !(regions[0] | regions[1] | regions[2] | regions[3]);
  if (ok) {
    memcpy(b + kHeaderBytesAt, &header, 4);
    memset(b + header - 4, 0, kNow - (header - 4));
    crc = Crc32c(b, header - 4);
    memcpy(b + header - 4, &crc, 4);
    ok = pwrite(fd, b, sizeof(b), 0) == static_cast<ssize_t>(sizeof(b));
  }
  close(fd);
  return ok;
}

}  // namespace

bool MakePoolPredateCoherence(const std::string &pool) {
  return RewriteSuperblockHeader(pool, 168);
}

bool MakePoolPredateRegions(const std::string &pool) {
  return RewriteSuperblockHeader(pool, 172);
}

bool RaisePoolFence(const std::string &pool, uint64_t epoch) {
  // The layout of src/alloc/pool_control.cc: the fence is the first word of
  // the control page, right after the 4 KiB superblock.
  int fd = open(pool.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = pwrite(fd, &epoch, sizeof(epoch), 4096) == sizeof(epoch);
  close(fd);
  return ok;
}

bool MappedFrom(const void *p, uint64_t len, const std::string &file) {
  // Every byte must lie in some mapping of `file`; a fragmented chunk spans
  // several mappings back to back.
  std::ifstream maps("/proc/self/maps");
  std::string line;
  uintptr_t at = reinterpret_cast<uintptr_t>(p), end = at + len;
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  while (std::getline(maps, line)) {
    uintptr_t lo, hi;
    if (sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && line.find(file) != std::string::npos)
      ranges.emplace_back(lo, hi);
  }
  std::sort(ranges.begin(), ranges.end());
  for (auto [lo, hi] : ranges)
    if (lo <= at && at < hi) at = hi;
  return at >= end;
}

}  // namespace maru_test

namespace maru_test {

uint64_t OffsetInFile(const void *p, const std::string &file) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  auto a = reinterpret_cast<uintptr_t>(p);
  while (std::getline(maps, line)) {
    uintptr_t lo, hi;
    unsigned long long off;
    if (sscanf(line.c_str(), "%lx-%lx %*s %llx", &lo, &hi, &off) == 3 && a >= lo && a < hi &&
        line.find(file) != std::string::npos)
      return off + (a - lo);
  }
  return ~0ull;
}

pid_t SpawnClient(const std::string &address, const std::string &script) {
  std::string cmd = BinDir("tests/direct_client") + " " + address + " " + script;
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char *>(nullptr));
    _exit(127);
  }
  return pid;
}

std::string ClientCommand(const std::string &address, const std::string &script) {
  return BinDir("tests/direct_client") + " " + address + " " + script;
}

int RunClient(const std::string &address, const std::string &script, std::string *out) {
  std::string output;
  int rc = Run(ClientCommand(address, script), &output);
  if (rc != 0) fprintf(stderr, "direct_client %s -> %d: %s\n", script.c_str(), rc, output.c_str());
  if (out) *out = output;
  return rc;
}

}  // namespace maru_test

namespace maru_test {

FuseMount::FuseMount(const std::string &address, const std::string &options)
    : address_(address), options_(options) {
  mountpoint_ = dir_.path() + "/mnt";
  mkdir(mountpoint_.c_str(), 0755);
}

static bool IsFuseMount(const std::string &path) {
  struct statfs st;
  return statfs(path.c_str(), &st) == 0 && st.f_type == 0x65735546;  // FUSE_SUPER_MAGIC
}

bool FuseMount::Start() {
  std::string opts = "timeout_ms=3000" + (options_.empty() ? "" : "," + options_);
  std::string log = dir_.path() + "/fuse.log";
  const std::string seen = host_ ? host_->Path(mountpoint_) : mountpoint_;
  pid_ = StartLogged(On(host_, {FuseBinary(), address_, mountpoint_, "-f", "-o", opts}), log,
                     [&] { return IsFuseMount(seen); });
  if (pid_ < 0) {
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    fprintf(stderr, "maru-fuse did not mount:\n%s\n", ss.str().c_str());
  }
  return pid_ > 0;
}

void FuseMount::Unmount() {
  if (pid_ <= 0) return;
  // A clean unmount when nothing is busy, else a lazy one: never leave a
  // mount behind.
  const std::string on = host_ ? host_->Exec() : "";
  if (Run(on + "fusermount3 -u " + mountpoint_) != 0) Run(on + "fusermount3 -uz " + mountpoint_);
  if (!WaitFor([&] { return waitpid(pid_, nullptr, WNOHANG) == pid_; }, 5000)) {
    kill(pid_, SIGTERM);
    if (!WaitFor([&] { return waitpid(pid_, nullptr, WNOHANG) == pid_; }, 5000)) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_ = -1;
}

FuseMount::~FuseMount() {
  Unmount();
  rmdir(mountpoint_.c_str());
}

}  // namespace maru_test

namespace maru_test {

std::string AgentBinary() {
  return BinDir("src/rdma/maru-agent");
}

Agent::Agent(const std::string &pool, const std::string &server, const std::string &listen)
    : pool_(pool), server_(server), listen_(listen) {}

Agent::~Agent() {
  Kill9();
}

static std::string ReadFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Agent::log_path() const {
  return dir_.path() + "/agent.log";
}

std::string Agent::log() const {
  return ReadFile(log_path());
}

bool Agent::Start() {
  const std::string log = log_path();
  truncate(log.c_str(), 0);
  pid_ = StartLogged(
      On(host_, {AgentBinary(), "--pool", pool_, "--server", server_, "--listen", listen_}), log,
      [&] { return ReadFile(log).find("serving") != std::string::npos; });
  if (pid_ < 0) {
    fprintf(stderr, "maru-agent did not start:\n%s\n", ReadFile(log).c_str());
    return false;
  }
  std::string text = ReadFile(log);
  size_t at = text.find(" at tcp://");
  address_ = at == std::string::npos ? "" : text.substr(at + 4, text.find('\n', at) - at - 4);
  return true;
}

void Agent::Kill9() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

int Lan::ClaimSubnet() {
  // Two networks on one subnet (concurrent test runs, or a veth a killed
  // run left behind) send the machine's replies down the wrong veth, where
  // the other side answers with a reset.
  static std::atomic<int> counter{0};
  const int start = getpid() * 7 + counter++;
  for (int k = 0; k < 250; ++k) {
    const int id = (start + k) % 250 + 1;
    const std::string lock = "/tmp/maru-test-netns-" + std::to_string(id) + ".lock";
    int fd = open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) continue;
    std::string routes;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 &&
        Run("ip -4 route show 10.213." + std::to_string(id) + ".0/24", &routes) == 0 &&
        routes.empty()) {
      lock_fd_ = fd;
      return id;
    }
    close(fd);
  }
  return 0;
}

// Removes the namespaces of test runs that were killed before their
// destructors ran (meson's timeout): their interfaces go with them, and so
// do the routes that would keep their subnets claimed. A namespace whose
// pid lives, or belongs to someone else, is left alone.
static void RemoveStaleNamespaces() {
  std::string list;
  if (Run("ip netns list", &list) != 0) return;
  std::istringstream lines(list);
  std::string line;
  while (std::getline(lines, line)) {
    const std::string name = line.substr(0, line.find(' '));  // before "(id: N)"
    int pid = 0;
    if (sscanf(name.c_str(), "maru-ns-%d-", &pid) != 1 &&
        sscanf(name.c_str(), "maru-lan-%d-", &pid) != 1)
      continue;
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) Run("ip netns del " + name);
  }
}

Lan::Lan() {
  static std::atomic<int> counter{0};
  static std::once_flag swept;
  std::call_once(swept, RemoveStaleNamespaces);
  const int id = ClaimSubnet();
  if (id == 0) {
    fprintf(stderr, "cannot set up a network: no free 10.213.N.0/24 subnet\n");
    return;
  }
  prefix_ = "10.213." + std::to_string(id) + ".";
  root_ip_ = prefix_ + "1";
  switch_ns_ = UniqueName("maru-lan");
  // Interface names are at most 15 characters.
  root_if_ = "mh" + std::to_string(getpid() % 100000) + "x" + std::to_string(counter++);
  const std::string sw = "ip -n " + switch_ns_ + " ";
  std::string out;
  ok_ =
      Run("ip netns add " + switch_ns_, &out) == 0 &&
      Run(sw + "link add br0 type bridge", &out) == 0 && Run(sw + "link set br0 up", &out) == 0 &&
      Run("ip link add " + root_if_ + " type veth peer name root netns " + switch_ns_, &out) == 0 &&
      Run(sw + "link set root master br0 up", &out) == 0 &&
      Run("ip addr add " + root_ip_ + "/24 dev " + root_if_, &out) == 0 &&
      Run("ip link set " + root_if_ + " up", &out) == 0;
  if (!ok_) fprintf(stderr, "cannot set up a network: %s\n", out.c_str());
}

Lan::~Lan() {
  if (lock_fd_ < 0) return;
  Run("ip link del " + root_if_);
  Run("ip netns del " + switch_ns_);
  close(lock_fd_);
}

NetNs::NetNs() : own_lan_(std::make_unique<Lan>()) {
  Create(own_lan_.get());
}

NetNs::NetNs(Lan *lan) {
  Create(lan);
}

static ino_t Inode(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

void NetNs::Create(Lan *lan) {
  lan_ = lan;
  if (!lan->ok()) return;
  static std::atomic<int> counter{0};
  name_ = UniqueName("maru-ns");
  // Made in their namespaces directly: the machine never has an interface
  // of that name, so every host's may be eth0.
  switch_if_ = "h" + std::to_string(counter++);
  if_ = "eth0";
  ip_ = lan->prefix_ + std::to_string(lan->next_address_++);
  const std::string in = "ip -n " + name_ + " ";
  std::string out;
  bool up =
      Run("ip netns add " + name_, &out) == 0 &&
      Run("ip link add " + switch_if_ + " netns " + lan->switch_ns_ + " type veth peer name " +
              if_ + " netns " + name_,
          &out) == 0 &&
      Run("ip -n " + lan->switch_ns_ + " link set " + switch_if_ + " master br0 up", &out) == 0 &&
      Run(in + "addr add " + ip_ + "/24 dev " + if_, &out) == 0 &&
      Run(in + "link set " + if_ + " up", &out) == 0 && Run(in + "link set lo up", &out) == 0;
  if (!up) {
    fprintf(stderr, "cannot set up a network namespace: %s\n", out.c_str());
    return;
  }
  // `ip netns exec` gives what it runs a mount namespace of its own (mounts
  // of the machine still reach it, its own do not leave it) with the
  // host's /sys; the holder keeps that namespace for every later command,
  // which enters it by the holder's pid.
  holder_ = fork();
  if (holder_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    execlp("ip", "ip", "netns", "exec", name_.c_str(), "sleep", "infinity",
           static_cast<char *>(nullptr));
    _exit(127);
  }
  const std::string proc = "/proc/" + std::to_string(holder_);
  const ino_t net = Inode("/run/netns/" + name_);
  bool exited = false;
  ok_ = WaitFor(
      [&] {
        if (waitpid(holder_, nullptr, WNOHANG) == holder_) return exited = true;
        std::error_code ec;
        return std::filesystem::read_symlink(proc + "/exe", ec).filename() == "sleep" &&
               Inode(proc + "/ns/net") == net &&
               Inode(proc + "/ns/mnt") != Inode("/proc/self/ns/mnt");
      },
      20000);
  if (exited) holder_ = -1;
  ok_ = ok_ && !exited;
  if (!ok_) fprintf(stderr, "the namespaces of host %s did not come up\n", name_.c_str());
}

NetNs::~NetNs() {
  if (holder_ > 0) {
    kill(holder_, SIGKILL);
    waitpid(holder_, nullptr, 0);
  }
  if (name_.empty()) return;
  // Deleting one end of the veth deletes both, now, whatever still holds
  // the namespace.
  Run("ip -n " + lan_->switch_ns_ + " link del " + switch_if_);
  Run("ip netns del " + name_);
}

bool NetNs::Cut() const {
  return Run("ip -n " + name_ + " link set " + if_ + " down") == 0;
}

bool NetNs::Reconnect() const {
  return Run("ip -n " + name_ + " link set " + if_ + " up") == 0;
}

std::vector<std::string> NetNs::ExecArgs() const {
  return {"nsenter", "-t", std::to_string(holder_), "-n", "-m", "env", "UCX_NET_DEVICES=" + if_};
}

std::string NetNs::Exec() const {
  std::string line;
  for (const std::string &a : ExecArgs()) line += a + " ";
  return line;
}

std::string NetNs::Path(const std::string &path) const {
  return "/proc/" + std::to_string(holder_) + "/root" + path;
}

Hosts::Hosts(int n) {
  for (int i = 0; i < n; ++i) hosts_.push_back(std::make_unique<NetNs>(&lan_));
}

bool Hosts::ok() const {
  return lan_.ok() &&
         std::all_of(hosts_.begin(), hosts_.end(), [](const auto &h) { return h->ok(); });
}

}  // namespace maru_test
