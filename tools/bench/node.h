// What the commands that start their own Maru node share (maru-bench suite
// and scale): finding the other binaries, child processes stopped by pid,
// a node (pool in /dev/shm, maru-server, maru-fuse), and reading the other
// commands' JSON lines.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace maru::bench {

// A binary installed next to maru-bench, or in the build tree (`build_subdir`).
std::string Sibling(const std::string &name, const std::string &build_subdir);
// A system binary's path, or "" when it is not installed.
std::string FromPath(const std::string &name);

// Child processes: started by argv, stopped by pid (never by name).
class Processes {
 public:
  ~Processes() { StopAll(); }
  // Starts `argv` with its output appended to `log`.
  pid_t Start(const std::vector<std::string> &argv, const std::string &log,
              const std::vector<std::string> &env = {});
  // SIGTERM, and SIGKILL after 10 s, for one started here.
  void Stop(pid_t pid);
  // True if one started here has exited (it is reaped and forgotten).
  bool Exited(pid_t pid);
  void StopAll();
  // Runs to completion; stdout and stderr into `out`. Returns the exit code.
  static int Run(const std::vector<std::string> &argv, std::string *out,
                 const std::vector<std::string> &env = {});

 private:
  std::vector<pid_t> started_;
};

// Polls `ready` every 50 ms until it holds or `seconds` have passed.
bool WaitUntil(const std::function<bool()> &ready, int seconds);

// The last JSON line of a command's output.
std::string LastJson(const std::string &out);
// The number at the JSON pointer `pointer` ("/runs/0/p50_us") in the JSON
// text `json`; NaN when it is absent, not a number (null: a figure that
// could not be measured), or `json` is not JSON.
double Field(const std::string &json, const std::string &pointer);
// `v` formatted, or "–" for NaN (a figure that could not be measured).
std::string Fmt(const char *format, double v);
// Replaces (or appends) the section between <!-- maru-bench NAME: begin -->
// and <!-- maru-bench NAME: end --> in `doc`; `section` includes the markers.
bool WriteSection(const std::string &doc, const std::string &name, const std::string &section);
std::string SectionBegin(const std::string &name);
std::string SectionEnd(const std::string &name);

// A Maru node on an emulated pool: its files live in `work` and the pool
// in /dev/shm; everything is stopped and removed by Stop().
class Node {
 public:
  // `tag` tells apart the pools of several nodes of one process.
  Node(std::string work, Processes *procs, const std::string &tag = "");
  ~Node() { Stop(); }
  // `sparse`: the pool file's memory is not allocated (maructl mkpool --sparse).
  // `coherence`: mkpool's --coherence (empty: its default, hw).
  bool Format(uint64_t size, uint64_t unit, std::string *error, bool sparse = false,
              const std::string &coherence = "");
  // Starts maru-server and waits until it answers.
  bool StartServer(const std::vector<std::string> &flags, std::string *error);
  void StopServer();
  bool Mount(std::string *error);
  void Stop();
  // Also removed if the process is stopped by a signal (two at most).
  static void RemoveOnSignal(const std::string &dir);

  std::string address() const { return "unix://" + socket_; }
  const std::string &pool() const { return pool_; }
  const std::string &db() const { return db_; }
  const std::string &mountpoint() const { return mnt_; }
  bool mounted() const { return mounted_; }
  pid_t server_pid() const { return server_; }
  std::string log() const { return work_ + "/server.log"; }

 private:
  static void OnSignal(int sig);
  static char cleanup_dirs[2][256];
  void RegisterCleanup();
  static char cleanup_pool[256];
  static char cleanup_mount[256];

  std::string work_, pool_, socket_, db_, mnt_;
  Processes *procs_;
  pid_t server_ = -1;
  bool mounted_ = false;
};

}  // namespace maru::bench
