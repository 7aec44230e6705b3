// maru-bench: benchmarks of a live Maru server. See man/maru-bench.1.
#include <string>

#include "bench_common.h"

int main(int argc, char **argv) {
  using namespace maru::bench;
  std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "chunks") return RunChunks(argc, argv);
  if (cmd == "lookup") return RunLookup(argc, argv);
  if (cmd == "replay") return RunReplay(argc, argv);
  if (cmd == "--help" || cmd == "-h") {
    puts(
        "Usage: maru-bench COMMAND [OPTIONS]\n"
        "Benchmarks a running maru-server; every command takes --help.\n\n"
        "Commands:\n"
        "  chunks   store/load throughput of whole chunks, as ratios to memcpy\n"
        "  lookup   latency of batched prefix lookups\n"
        "  replay   replay a Mooncake-format KV-cache trace: hit ratios and requests/s");
    return 0;
  }
  return Fail(cmd.empty() ? "no command (see maru-bench --help)" : "unknown command '" + cmd + "'");
}
