// Test harness: real pools in /dev/shm, real maru-server processes, temp
// directories. Everything a test creates carries a unique name and is
// removed (and every process it started, stopped by pid) when the test ends,
// also when it fails.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace maru_test {

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
  explicit TestPool(uint64_t size = 256ull << 20, uint64_t unit = 64u << 10,
                    const std::string &coherence = "");
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
  void Stop();   // SIGTERM and wait
  void Kill9();  // SIGKILL and wait
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // Starts it with at most `n` open descriptors (soft and hard limit), as
  // a host configured so would: a flood reaches the limit sooner.
  void LimitDescriptors(uint64_t n) { nofile_ = n; }
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
  pid_t pid_ = -1;
};

// A maru-fuse mount of a server on a fresh temp directory; unmounted and its
// daemon stopped on destruction, also when the test failed.
class FuseMount {
 public:
  FuseMount(const std::string &address, const std::string &options = "");
  ~FuseMount();
  bool Start();  // mounts and waits until the mount answers
  void Unmount();
  const std::string &path() const { return mountpoint_; }
  std::string operator/(const std::string &rel) const { return mountpoint_ + "/" + rel; }
  pid_t pid() const { return pid_; }

 private:
  TempDir dir_;
  std::string address_, options_, mountpoint_;
  pid_t pid_ = -1;
};

// A maru-agent serving `pool` of `server`, listening on HOST:PORT.
class Agent {
 public:
  Agent(const std::string &pool, const std::string &server, const std::string &listen);
  ~Agent();
  bool Start();
  void Kill9();
  const std::string &address() const { return address_; }  // what clients are told
  pid_t pid() const { return pid_; }
  std::string log() const;  // what it printed

 private:
  std::string log_path() const;

  TempDir dir_;
  std::string pool_, server_, listen_, address_;
  pid_t pid_ = -1;
};

// A network namespace with a veth pair to the host: a "remote host" whose
// traffic really crosses a network interface. Removed on destruction.
class NetNs {
 public:
  NetNs();
  ~NetNs();
  bool ok() const { return ok_; }
  const std::string &host_ip() const { return host_ip_; }  // the host's end
  // Prefix that runs a command inside the namespace. UCX there uses the
  // namespace's veth only.
  std::string Exec() const {
    return "ip netns exec " + name_ + " env UCX_NET_DEVICES=" + peer_if_ + " ";
  }
  // The host's end of the veth: what a UCX process on the host should use
  // (UCX_NET_DEVICES), not the veths of other test runs that come and go.
  const std::string &host_if() const { return host_if_; }

 private:
  // Claims a 10.213.N.0/24 subnet no other namespace on this host uses (an
  // exclusive lock per N across processes, and no route to it already);
  // returns N, or 0 if none is free.
  int ClaimSubnet();

  std::string name_, host_if_, peer_if_, host_ip_;
  int lock_fd_ = -1;  // holds the subnet's lock while the namespace lives
  bool ok_ = false;
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

// True if [p, p+len) lies in a mapping of `file` in /proc/self/maps.
bool MappedFrom(const void *p, uint64_t len, const std::string &file);
// Rewrites the superblock of the hw pool `pool` as Maru wrote it before the
// pool named its coherence (a header without the field, its CRC where the
// field is now): what a pool formatted by an older maructl holds. False if
// the pool is not a hw pool of the current format.
bool MakePoolPredateCoherence(const std::string &pool);
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
