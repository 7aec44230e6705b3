// Shared pieces of maru-bench: timing, statistics, buffers, output.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "maru_direct_internal.h"
#include "util/clock.h"
#include "util/flags.h"

namespace maru::bench {

// The q-quantile of `v` (sorted in place).
inline double Quantile(std::vector<double> &v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// A heap buffer whose pages are already faulted in.
inline std::vector<uint8_t> TouchedBuffer(uint64_t size, uint8_t seed) {
  std::vector<uint8_t> buf(size);
  for (uint64_t i = 0; i < size; ++i) buf[i] = static_cast<uint8_t>(i * 131 + seed);
  return buf;
}

inline int Fail(const std::string &message) {
  fprintf(stderr, "maru-bench: %s\n", message.c_str());
  return 1;
}

// Parses a command's flags (argv[2..]). Returns -1 to go on, else the exit
// code: 0 after --help, 1 after an error.
inline int ParseFlags(Flags &flags, int argc, char **argv) {
  std::vector<std::string> args;
  Status s = flags.Parse(argc, argv, 2, &args);
  if (!s.ok()) return Fail(s.message());
  if (!args.empty()) return Fail("unexpected argument '" + args[0] + "' (see --help)");
  if (flags.help_requested()) return fputs(flags.Help().c_str(), stdout), 0;
  return -1;
}

int RunChunks(int argc, char **argv);
int RunLookup(int argc, char **argv);
int RunBatch(int argc, char **argv);
int RunReplay(int argc, char **argv);
int RunShare(int argc, char **argv);
int RunFiles(int argc, char **argv);
int RunSuite(int argc, char **argv);
int RunFill(int argc, char **argv);
int RunScale(int argc, char **argv);
int RunQuota(int argc, char **argv);
int RunPolicies(int argc, char **argv);
int RunUcx(int argc, char **argv);
int RunOps(int argc, char **argv);

}  // namespace maru::bench
