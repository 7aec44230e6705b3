// What the index tests share: chunks stored with a pattern, maructl's output,
// processes spawned without a shell, and a server frozen for a scope.
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "harness.h"
#include "maru_direct_internal.h"  // beside namespace maru (index_layout.h)
#include "pattern.h"

namespace maru_test {

constexpr uint64_t kSize = 256 << 10;

inline int Store(maru_t *m, const std::string &path, uint64_t size = kSize, uint32_t mode = 0) {
  maru_create_opts_t opts{};
  opts.mode = mode;
  maru_chunk_t *c = nullptr;
  int rc = maru_create_ex(m, path.c_str(), size, &opts, &c);
  if (rc) return rc;
  maru_test::FillPattern(maru_chunk_data(c), size, path);
  rc = maru_seal(c);
  maru_release(c);
  return rc;
}

inline std::string Maructl(const std::string &args) {
  std::string out;
  maru_test::Run(maru_test::MaructlBinary() + " " + args, &out);
  return out;
}

inline uint64_t DeferredBytes(const Server &server) {
  std::string out = Maructl("df --json --server " + server.address());
  size_t at = out.find("\"deferred\":");
  return at == std::string::npos ? ~0ull : strtoull(out.c_str() + at + 11, nullptr, 10);
}

inline std::string ReadFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `command` in its own process (not under a shell: kill -9 reaches it),
// its output into `out_file`.
inline pid_t Spawn(const std::string &command, const std::string &out_file) {
  const std::string line = "exec " + command + " > " + out_file + " 2>&1";
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char *>(nullptr));
    _exit(127);
  }
  return pid;
}

// The server stopped (SIGSTOP) for the life of this object.
class Frozen {
 public:
  explicit Frozen(const Server &s) : pid_(s.pid()) { ok_ = maru_test::Freeze(pid_); }
  ~Frozen() { kill(pid_, SIGCONT); }
  bool ok() const { return ok_; }

 private:
  pid_t pid_;
  bool ok_ = false;
};

}  // namespace maru_test
