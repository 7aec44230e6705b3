// What every benchmark of a live maru-server shares: its flags (--server
// first, then the command's own, then --dir for its chunks and --json, as
// each command's --help lists them) and the connection it makes.
#pragma once

#include <string>

#include "maru_direct_internal.h"
#include "util/flags.h"

namespace maru::bench {

class ServerBench {
 public:
  // The command's flags, --server among them.
  ServerBench(std::string usage, std::string summary);
  ServerBench(const ServerBench &) = delete;
  ServerBench &operator=(const ServerBench &) = delete;

  // For the command's own flags.
  Flags &flags() { return flags_; }
  // Also takes --dir, where the command's chunks go (default `dir`).
  void TakeDir(std::string dir, std::string help = "directory for the benchmark's chunks");
  // Adds --dir (if taken) and --json, and parses argv[2..]: -1 to go on,
  // else the exit code (as ParseFlags).
  int Parse(int argc, char **argv);

  const std::string &server() const { return server_; }
  const std::string &dir() const { return dir_; }
  bool json() const { return json_; }

 private:
  Flags flags_;
  std::string server_ = "unix:///run/maru/maru.sock";
  std::string dir_, dir_help_;
  bool takes_dir_ = false;
  bool json_ = false;
};

// A connection to `server`; null after printing why ("connect: ...").
maru_t *Connect(const std::string &server);

}  // namespace maru::bench
