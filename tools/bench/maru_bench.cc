// maru-bench: benchmarks of a live Maru server. See man/maru-bench.1.
#include <string>

#include "bench/common.h"

int main(int argc, char **argv) {
  using namespace maru::bench;
  std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "chunks") return RunChunks(argc, argv);
  if (cmd == "lookup") return RunLookup(argc, argv);
  if (cmd == "batch") return RunBatch(argc, argv);
  if (cmd == "replay") return RunReplay(argc, argv);
  if (cmd == "share") return RunShare(argc, argv);
  if (cmd == "files") return RunFiles(argc, argv);
  if (cmd == "suite") return RunSuite(argc, argv);
  if (cmd == "fill") return RunFill(argc, argv);
  if (cmd == "scale") return RunScale(argc, argv);
  if (cmd == "quota") return RunQuota(argc, argv);
  if (cmd == "policies") return RunPolicies(argc, argv);
  if (cmd == "ucx") return RunUcx(argc, argv);
  if (cmd == "ops") return RunOps(argc, argv);
  if (cmd == "coherence") return RunCoherence(argc, argv);
  if (cmd == "--help" || cmd == "-h") {
    puts(
        "Usage: maru-bench COMMAND [OPTIONS]\n"
        "Benchmarks Maru; every command takes --help.\n\n"
        "Commands:\n"
        "  chunks   store/load throughput of whole chunks, as ratios to memcpy\n"
        "  lookup   latency of batched prefix lookups (index and by message)\n"
        "  ops      open + release of one chunk in threads and processes (index and by message)\n"
        "  batch    per-key cost of batched store and exists calls against one by one\n"
        "  replay   replay a Mooncake-format KV-cache trace: hit ratios and requests/s\n"
        "  policies eviction policies side by side, offline: block/token hit, recompute saved\n"
        "  share    one producer, N consumer processes sharing chunks (Maru or Redis)\n"
        "  files    write and cold-read files in a directory (a mount, or tmpfs)\n"
        "  suite    all of the above side by side on a node it starts: Markdown and a plot\n"
        "  fill     create many small chunks from several processes\n"
        "  quota    what a directory quota costs a store (root)\n"
        "  ucx      UCX's own get/put bandwidth on this host: the remote path's ceiling\n"
        "  coherence  store and lookup on a --coherence flush pool against a hw one\n"
        "  scale    metadata cost from 10k to 1M chunks on a node it starts: Markdown");
    return 0;
  }
  return Fail(cmd.empty() ? "no command (see maru-bench --help)" : "unknown command '" + cmd + "'");
}
