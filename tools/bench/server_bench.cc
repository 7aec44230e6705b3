#include "bench/server_bench.h"

#include "bench/common.h"

namespace maru::bench {

ServerBench::ServerBench(std::string usage, std::string summary)
    : flags_(std::move(usage), std::move(summary)) {
  flags_.String("server", &server_, "maru-server address");
}

void ServerBench::TakeDir(std::string dir, std::string help) {
  dir_ = std::move(dir);
  dir_help_ = std::move(help);
  takes_dir_ = true;
}

int ServerBench::Parse(int argc, char **argv) {
  if (takes_dir_) flags_.String("dir", &dir_, dir_help_);
  flags_.Bool("json", &json_, "end with one JSON line of the figures");
  return ParseFlags(flags_, argc, argv);
}

maru_t *Connect(const std::string &server) {
  maru_t *m = nullptr;
  if (int rc = maru_connect(server.c_str(), &m)) {
    Fail("connect: " + std::string(maru_strerror(rc)));
    return nullptr;
  }
  return m;
}

}  // namespace maru::bench
