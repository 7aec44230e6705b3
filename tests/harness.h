// Test harness: real pools in /dev/shm, real maru-server processes, temp
// directories. Everything a test creates carries a unique name and is
// removed (and every process it started, stopped by pid) when the test ends,
// also when it fails.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace maru_test {

class NetNs;

// A directory under /tmp, removed with its contents.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string &path() const { return path_; }

 private:
  std::string path_;
};

// A pool file in /dev/shm formatted by `maructl mkpool`, removed at the end.
class TestPool {
 public:
  // `coherence`: mkpool's --coherence (hw or flush); empty: its default.
  // `more`: more mkpool options (e.g. "--index-size 0": an index file).
  explicit TestPool(uint64_t size = 256ull << 20, uint64_t unit = 64u << 10,
                    const std::string &coherence = "", const std::string &more = "");
  ~TestPool();
  const std::string &path() const { return path_; }

 private:
  std::string path_;
};

// A maru-server process on a pool, listening on a Unix socket in a temp dir.
class Server {
 public:
  Server(const std::string &pool, std::vector<std::string> extra_args = {});
  ~Server();  // stops it (SIGTERM, then SIGKILL) if running

  // Starts and waits until it serves; false (with the log) if it exited.
  bool Start();
  // Starts and waits until `ready` holds (a standby does not serve yet).
  bool StartWhen(const std::function<bool()> &ready);
  // True once it answers on its Unix socket.
  bool Serves() const;
  // If it exited, reaps it: its exit code (128+signal), else -1.
  int Exited();
  // Continues it after a Freeze().
  void Thaw();
  void Stop();   // SIGTERM and wait
  void Kill9();  // SIGKILL and wait
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // Starts it with at most `n` open descriptors (soft and hard limit), as
  // a host configured so would: a flood reaches the limit sooner.
  void LimitDescriptors(uint64_t n) { nofile_ = n; }
  // Runs it on `host` (before Start), not on the machine itself.
  void RunOn(const NetNs *host) { host_ = host; }
  std::string address() const { return "unix://" + socket_; }
  const std::string &socket_path() const { return socket_; }
  const std::string &db() const { return db_; }
  std::string log() const;
  // Runs the server in the foreground to completion; returns its exit code
  // and puts its stderr in `output` (for start-up refusals).
  int RunToExit(std::string *output);

 private:
  TempDir dir_;
  std::string pool_, socket_, db_, log_;
  std::vector<std::string> extra_;
  uint64_t nofile_ = 0;
  const NetNs *host_ = nullptr;
  pid_t pid_ = -1;
};

// A maru-fuse mount of a server on a fresh temp directory; unmounted and its
// daemon stopped on destruction, also when the test failed.
class FuseMount {
 public:
  FuseMount(const std::string &address, const std::string &options = "");
  ~FuseMount();
  // Mounts on `host` (before Start): the mount is seen there only, at path().
  void RunOn(const NetNs *host) { host_ = host; }
  bool Start();  // mounts and waits until the mount answers
  void Unmount();
  const std::string &path() const { return mountpoint_; }
  std::string operator/(const std::string &rel) const { return mountpoint_ + "/" + rel; }
  pid_t pid() const { return pid_; }

 private:
  TempDir dir_;
  std::string address_, options_, mountpoint_;
  const NetNs *host_ = nullptr;
  pid_t pid_ = -1;
};

// A maru-agent serving `pool` of `server`, listening on HOST:PORT.
class Agent {
 public:
  Agent(const std::string &pool, const std::string &server, const std::string &listen);
  ~Agent();
  void RunOn(const NetNs *host) { host_ = host; }  // before Start
  bool Start();
  void Kill9();
  const std::string &address() const { return address_; }  // what clients are told
  pid_t pid() const { return pid_; }
  std::string log() const;  // what it printed

 private:
  std::string log_path() const;

  TempDir dir_;
  std::string pool_, server_, listen_, address_;
  const NetNs *host_ = nullptr;
  pid_t pid_ = -1;
};

// A private network on this machine: a bridge in a namespace of its own (a
// switch, so that the root namespace's firewall never sees the traffic
// between hosts), on a 10.213.N.0/24 subnet no other test run uses, with a
// veth from the root namespace at .1. Hosts (NetNs) plug into it. Removed on
// destruction.
class Lan {
 public:
  Lan();
  ~Lan();
  Lan(const Lan &) = delete;
  Lan &operator=(const Lan &) = delete;
  bool ok() const { return ok_; }
  const std::string &name() const { return switch_ns_; }   // the switch's, in `ip netns list`
  const std::string &root_ip() const { return root_ip_; }  // the machine's own address on it
  const std::string &root_if() const { return root_if_; }  // and its interface

 private:
  friend class NetNs;
  // Claims a subnet no other network on this machine uses (an exclusive
  // lock per N across processes, and no route to it already); returns N,
  // or 0 if none is free.
  int ClaimSubnet();

  std::string switch_ns_, root_if_, root_ip_, prefix_;  // prefix_: "10.213.N."
  int lock_fd_ = -1;  // holds the subnet's lock while the network lives
  int next_address_ = 2;
  bool ok_ = false;
};

// A "host" on this machine: a network namespace with its own address on a
// Lan and a mount namespace of its own (mounts made there are seen by its
// commands only), held by a process that lives as long as the host. The
// filesystem is otherwise the machine's: /tmp, and the pool in /dev/shm.
// Removed on destruction, with its interfaces.
class NetNs {
 public:
  NetNs();                   // alone on a network of its own with the machine
  explicit NetNs(Lan *lan);  // one of several hosts on `lan`
  ~NetNs();
  NetNs(const NetNs &) = delete;
  NetNs &operator=(const NetNs &) = delete;
  bool ok() const { return ok_; }
  const std::string &name() const { return name_; }  // in `ip netns list`
  const std::string &ip() const { return ip_; }      // this host's address
  // The machine's (root namespace's) end of the network: where a server run
  // outside every host listens, and the interface UCX there should use
  // (UCX_NET_DEVICES), not the veths of other test runs that come and go.
  const std::string &host_ip() const { return lan_->root_ip(); }
  const std::string &host_if() const { return lan_->root_if(); }
  // A command line prefix that runs a command on this host; UCX there uses
  // the host's interface only.
  std::string Exec() const;
  // The same as an argument vector, for exec.
  std::vector<std::string> ExecArgs() const;
  // `path` as this host sees it, from outside: through its mounts.
  std::string Path(const std::string &path) const;
  pid_t holder() const { return holder_; }  // the process that holds the namespaces
  // Takes the host off its network (its interface down) and back: a cable cut.
  bool Cut() const;
  bool Reconnect() const;

 private:
  void Create(Lan *lan);

  std::unique_ptr<Lan> own_lan_;  // when alone
  Lan *lan_ = nullptr;
  std::string name_, switch_if_, if_, ip_;
  pid_t holder_ = -1;
  bool ok_ = false;
};

// N hosts on one Lan: what a test of many hosts sharing one pool starts with.
class Hosts {
 public:
  explicit Hosts(int n);
  bool ok() const;
  NetNs &operator[](int i) { return *hosts_[i]; }
  const NetNs &operator[](int i) const { return *hosts_[i]; }
  int size() const { return static_cast<int>(hosts_.size()); }
  const Lan &lan() const { return lan_; }

 private:
  Lan lan_;  // outlives the hosts on it
  std::vector<std::unique_ptr<NetNs>> hosts_;
};

// Forks; the child runs `body` and exits with its return value. Returns the
// child's pid.
pid_t Fork(const std::function<int()> &body);
// Waits for `pid`; returns its exit code, or 128+signal.
int Wait(pid_t pid);
// Stops `pid` with SIGSTOP and waits until it really is stopped.
bool Freeze(pid_t pid);
// Runs a command line through /bin/sh; returns the exit code and output.
int Run(const std::string &command, std::string *output = nullptr);
// Polls `condition` every few ms until it holds or `timeout_ms` passes.
bool WaitFor(const std::function<bool()> &condition, int timeout_ms = 10000);

// Paths of the built binaries.
std::string ServerBinary();
std::string MaructlBinary();
std::string FuseBinary();
std::string BinDir(const std::string &name);
// A file of the source tree.
std::string SourcePath(const std::string &name);
std::string UniqueName(const std::string &prefix);
// A TCP port on 127.0.0.1 that nothing listens on now (0 if none found).
int FreePort();

// True if [p, p+len) lies in a mapping of `file` in /proc/self/maps.
bool MappedFrom(const void *p, uint64_t len, const std::string &file);
// Rewrites the superblock of the hw pool `pool` as Maru wrote it before the
// pool named its coherence (a header without the field, its CRC where the
// field is now): what a pool formatted by an older maructl holds. False if
// the pool is not a hw pool of the current format.
bool MakePoolPredateCoherence(const std::string &pool);
// Rewrites a fresh pool's superblock as one formatted before the control
// page and the regions existed (false if it has an index or log region).
bool MakePoolPredateRegions(const std::string &pool);
// Sets the pool's fencing epoch (its control page) to `epoch`, as a leader
// elected through etcd would have.
bool RaisePoolFence(const std::string &pool, uint64_t epoch);
// The offset in `file` that address `p` maps, or ~0 if none.
uint64_t OffsetInFile(const void *p, const std::string &file);

// Starts tests/direct_client in the background; Wait() for its exit code.
pid_t SpawnClient(const std::string &address, const std::string &script);
// Runs tests/direct_client (a separate client process) against `address`
// with a script of commands; returns its exit code, output in `out`.
int RunClient(const std::string &address, const std::string &script, std::string *out = nullptr);
// The shell command that runs direct_client (to prefix with an environment
// or `ip netns exec`).
std::string ClientCommand(const std::string &address, const std::string &script);

}  // namespace maru_test
