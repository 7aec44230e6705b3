// maru-fuse: the daemon behind `mount -t fuse.maru`. See man/maru-fuse.8.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "fs/fuse_init.h"
#include "fs/fuse_loop.h"
#include "fs/fuse_ring.h"
#include "fs/maru_fs.h"
#include "util/cpu_wake_latency.h"
#include "util/log.h"

using namespace maru;

namespace {

struct Options {
  const char *server = nullptr;
  const char *mountpoint = nullptr;
  int foreground = 0;
  int debug = 0;
  int show_help = 0;
  int timeout_ms = 10000;
  int populate = -1;  // -1: Populate::kAuto
  int threads = 16;
  int direct_io = 0;
  int splice = 0;
  int cached_writes = 0;
  int cached_reads = 0;
  int uring = 1;
  int idle_poll = 1;
  double attr_timeout = 1.0;
  double entry_timeout = 1.0;
  char *checksum = nullptr;  // strings are allocated by fuse_opt_parse
  char *log_level = nullptr;
  char *log_file = nullptr;
  ~Options() {
    free(checksum);
    free(log_level);
    free(log_file);
  }
};

#define MARU_OPT(t, p) \
  { t, offsetof(Options, p), 1 }
const fuse_opt kOptions[] = {MARU_OPT("timeout_ms=%d", timeout_ms),
                             MARU_OPT("populate=%d", populate),
                             MARU_OPT("threads=%d", threads),
                             MARU_OPT("direct_io", direct_io),
                             MARU_OPT("splice=%d", splice),
                             MARU_OPT("cached_writes", cached_writes),
                             MARU_OPT("cached_reads", cached_reads),
                             MARU_OPT("uring=%d", uring),
                             MARU_OPT("idle_poll=%d", idle_poll),
                             MARU_OPT("attr_timeout=%lf", attr_timeout),
                             MARU_OPT("entry_timeout=%lf", entry_timeout),
                             MARU_OPT("checksum=%s", checksum),
                             MARU_OPT("log_level=%s", log_level),
                             MARU_OPT("log_file=%s", log_file),
                             MARU_OPT("-f", foreground),
                             MARU_OPT("-d", debug),
                             MARU_OPT("debug", debug),
                             MARU_OPT("-h", show_help),
                             MARU_OPT("--help", show_help),
                             FUSE_OPT_END};

void Usage() {
  puts(
      "Usage: maru-fuse SERVER MOUNTPOINT [-f] [-d] [-o OPTION[,OPTION...]]\n"
      "Mounts the namespace of the maru-server at SERVER (unix:///PATH or tcp://HOST:PORT).\n\n"
      "  -f                     stay in the foreground\n"
      "  -d, -o debug           foreground, and print every FUSE request\n"
      "  -o timeout_ms=N        fail a call with EIO when the server has not answered\n"
      "                         for N ms (default 10000)\n"
      "  -o checksum=NAME       checksum recorded when a file is sealed: xxh3 (default),\n"
      "                         crc32c or none\n"
      "  -o attr_timeout=S      seconds the kernel may cache attributes of sealed files\n"
      "                         and directories (default 1)\n"
      "  -o entry_timeout=S     seconds the kernel may cache names (default 1; misses are\n"
      "                         never cached)\n"
      "  -o populate=0|1        prefault the pool mapping at mount (default: a device\n"
      "                         of at most 16 GiB whose memory is allocated)\n"
      "  -o splice=0|1          splice read replies from a pool file (default 0)\n"
      "  -o cached_writes       writes go through the page cache (default: they bypass\n"
      "                         it, one copy each, faster; readers then fetch anew)\n"
      "  -o cached_reads        reads of sealed files go through the page cache (default:\n"
      "                         they bypass it, one copy each, the pool is the cache;\n"
      "                         on kernels before 6.6, where mmap of such files is\n"
      "                         refused, reads are cached whatever this says)\n"
      "  -o threads=N           threads serving requests other than reads and writes\n"
      "                         from /dev/fuse (default 16)\n"
      "  -o uring=0|1           serve requests over io_uring, a queue per CPU, where\n"
      "                         the kernel offers it (fuse.enable_uring=1; default 1)\n"
      "  -o idle_poll=0|1       while requests come, and 50 ms after, idle CPUs poll\n"
      "                         instead of sleeping, so that replies wake callers at\n"
      "                         once (a PM QoS request; root only; default 1)\n"
      "  -o direct_io           all reads and writes bypass the page cache, also on\n"
      "                         kernels before 6.6 (where mmap then fails)\n"
      "  -o log_level=LEVEL     error, warn, info, debug (default warn)\n"
      "  -o log_file=PATH       where a background daemon logs (default: nowhere)\n"
      "  -o allow_other, ...    any other option goes to FUSE (see fuse(8));\n"
      "                         allow_other is on by default when run as root,\n"
      "                         default_permissions always");
}

int OptProc(void *data, const char *arg, int key, fuse_args *) {
  auto *o = static_cast<Options *>(data);
  if (key != FUSE_OPT_KEY_NONOPT) return 1;
  if (!o->server) return o->server = arg, 0;
  if (!o->mountpoint) return o->mountpoint = arg, 0;
  fprintf(stderr, "maru-fuse: unexpected argument '%s'\n", arg);
  return -1;
}

// The parent of a background daemon waits to hear how the mount went, so
// that `mount` reports a failure instead of a daemon dying unseen.
class Daemonizer {
 public:
  // Forks before any RPC runtime or thread exists (a forked child could not
  // use them). Returns in the child; the parent exits with the child's verdict.
  void Fork() {
    if (pipe(pipe_) < 0) return;
    pid_t pid = fork();
    if (pid < 0) return;
    if (pid > 0) {
      close(pipe_[1]);
      char buf[1024];
      ssize_t n = read(pipe_[0], buf, sizeof(buf) - 1);
      if (n <= 0) _exit(1);
      buf[n] = '\0';
      if (buf[0] == '0') _exit(0);
      fprintf(stderr, "maru-fuse: %s\n", buf + 1);
      _exit(1);
    }
    close(pipe_[0]);
    setsid();
  }
  void Report(bool ok, const std::string &message = "") {
    if (pipe_[1] < 0) return;
    std::string out = (ok ? "0" : "1") + message;
    (void)!write(pipe_[1], out.data(), out.size());
    close(pipe_[1]);
    pipe_[1] = -1;
  }
  bool active() const { return pipe_[1] >= 0; }

 private:
  int pipe_[2] = {-1, -1};
};

Daemonizer g_daemon;

int Fail(const std::string &message) {
  if (g_daemon.active())
    g_daemon.Report(false, message);
  else
    fprintf(stderr, "maru-fuse: %s\n", message.c_str());
  return 1;
}

void Detach(const char *log_file) {
  (void)!chdir("/");
  int null = open("/dev/null", O_RDWR);
  dup2(null, 0);
  dup2(null, 1);
  int err = log_file ? open(log_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
  dup2(err >= 0 ? err : null, 2);
  if (err >= 0) close(err);
  close(null);
}

// The file-system options the mount options ask for; "" if they are
// sound, else what is wrong with them.
std::string FsOptionsOf(const Options &o, FsOptions *fs) {
  if (!o.server || !o.mountpoint) return "need SERVER and MOUNTPOINT (see --help)";
  if (o.log_level && !SetLogLevel(o.log_level))
    return std::string("unknown log_level ") + o.log_level;
  fs->attr_timeout = o.attr_timeout;
  fs->entry_timeout = o.entry_timeout;
  fs->direct_io = o.direct_io != 0;
  fs->splice = o.splice != 0;
  fs->direct_writes = o.cached_writes == 0;
  fs->cached_reads = o.cached_reads != 0;
  if (o.checksum && !ParseChecksumName(o.checksum, &fs->checksum))
    return std::string("unknown checksum ") + o.checksum + " (xxh3, crc32c, none)";
  if (o.timeout_ms <= 0 || o.threads <= 0) return "timeout_ms and threads must be positive";
  struct stat st;
  if (stat(o.mountpoint, &st) < 0 || !S_ISDIR(st.st_mode))
    return std::string(o.mountpoint) + ": not a directory";
  return "";
}

// What maru-fuse adds to the options it passes to FUSE.
void AddFuseArgs(const Options &o, fuse_args *args) {
  if (o.debug) fuse_opt_add_arg(args, "-d");
  if (getuid() == 0) fuse_opt_add_arg(args, "-oallow_other");
  // The kernel checks the mode bits too, on what it caches: a path walk
  // through cached names still needs search permission on every directory
  // (the server checks each request on its own, docs/filesystem.md).
  fuse_opt_add_arg(args, "-odefault_permissions");
  fuse_opt_add_arg(args, "-ofsname=maru");
  fuse_opt_add_arg(args, "-osubtype=maru");
}

// The file system over a session with the server and a mapping of its pool.
Result<std::unique_ptr<MaruFs>> Connect(const Options &o, const FsOptions &fs) {
  ClientOptions client_options;
  client_options.client_name = "maru-fuse";
  client_options.call_timeout_ms = o.timeout_ms;
  client_options.connect_timeout_ms = std::min(o.timeout_ms, 5000);
  client_options.retry_window_ms = o.timeout_ms;
  Result<std::unique_ptr<MetaClient>> client = MetaClient::Connect(o.server, client_options);
  if (!client.ok()) return client.status();
  Result<std::unique_ptr<PoolMap>> pool = PoolMap::Open(
      (*client)->session_info(),
      o.populate < 0 ? Populate::kAuto : (o.populate ? Populate::kAlways : Populate::kNever));
  if (!pool.ok()) return pool.status();
  return std::make_unique<MaruFs>(std::move(*client), std::move(*pool), fs);
}

// Mounts `fs` and serves it until it is unmounted; the exit status.
int Serve(MaruFs *fs, fuse_args *args, const Options &o) {
  fuse_session *se = fuse_session_new(args, MaruFs::Operations(), sizeof(fuse_lowlevel_ops), fs);
  if (!se) return Fail("bad FUSE options");
  fs->SetSession(se);
  if (fuse_set_signal_handlers(se) != 0) return Fail("cannot install signal handlers");
  if (fuse_session_mount(se, o.mountpoint) != 0) {
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return Fail(std::string("cannot mount on ") + o.mountpoint);
  }
  // The kernel's INIT, answered here: libfuse 3.14 cannot ask for mmap of
  // direct-I/O files on its own, and drops two flags MaruFs::Init wants
  // from its reply (without parallel dirops the kernel serves one lookup
  // of a directory at a time).
  const uint64_t ring = o.uring && FuseRingBuilt() ? kFuseOverIoUring : 0;
  const int64_t granted =
      AnswerInit(se, kFuseParallelDirops | kFuseHandleKillpriv | kFuseDirectIoAllowMmap | ring);
  if (granted < 0) {
    fuse_session_unmount(se);
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return Fail(std::string("cannot answer the kernel's INIT: ") +
                strerror(static_cast<int>(-granted)));
  }
  fs->SetMmapAllowed((granted & kFuseDirectIoAllowMmap) != 0);
  if (g_daemon.active()) {
    g_daemon.Report(true);
    Detach(o.log_file);
  }
  LOG_INFO("reads of sealed files %s the page cache", fs->DirectReads() ? "bypass" : "go through");
  // What may wait on the server, from /dev/fuse and from the ring.
  auto workers = std::make_unique<FuseWorkers>(se, static_cast<unsigned>(o.threads));
  CpuWakeLatency wake(o.idle_poll != 0);
  std::unique_ptr<FuseRing> uring;
  if (granted & kFuseOverIoUring) {
    // Two threads a CPU: a request that waits on another of its CPU (a
    // writeback under an invalidation) still finds one free.
    Result<std::unique_ptr<FuseRing>> started = FuseRing::Start(se, 2, workers.get(), &wake);
    if (started.ok())
      uring = std::move(*started);
    else
      LOG_WARN("requests go through /dev/fuse: %s", started.status().ToString().c_str());
  }
  LOG_INFO("requests are served over %s", uring ? "io_uring" : "/dev/fuse");
  // /dev/fuse: everything without the ring, and FORGETs, interrupts and
  // the replies to notifications with it.
  int rc = RunFuseLoop(se, workers.get(), &wake);
  // The ring's threads hand on to the workers, whose jobs serve its
  // entries: the threads stop first, the entries go last.
  if (uring) uring->Stop();
  workers.reset();
  uring.reset();
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  return rc == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char **argv) {
  SetLogTag("maru-fuse");
  SetLogLevel(LogLevel::kWarn);
  fuse_args args = FUSE_ARGS_INIT(argc, argv);
  // Whatever way main returns, the parsed arguments are freed.
  struct ArgsOwner {
    fuse_args *args;
    ~ArgsOwner() { fuse_opt_free_args(args); }
  } owner{&args};
  Options o;
  if (fuse_opt_parse(&args, &o, kOptions, OptProc) < 0) return 1;
  if (o.show_help) return Usage(), 0;
  if (o.debug) o.foreground = 1;
  FsOptions fs;
  if (std::string wrong = FsOptionsOf(o, &fs); !wrong.empty()) return Fail(wrong);
  AddFuseArgs(o, &args);
  if (!o.foreground) g_daemon.Fork();
  Result<std::unique_ptr<MaruFs>> maru_fs = Connect(o, fs);
  if (!maru_fs.ok()) return Fail(maru_fs.status().ToString());
  return Serve(maru_fs->get(), &args, o);
}
