// Shared pieces of maru-bench: timing, statistics, buffers, output.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "maru_direct_internal.h"
#include "util/cache_flush.h"
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

// A page-aligned heap buffer whose pages are faulted in, filled like
// TouchedBuffer. Chunks in the pool are page-aligned, and so are an
// engine's large buffers; memcpy's speed depends on the alignment.
class AlignedBuffer {
 public:
  AlignedBuffer(uint64_t size, uint8_t seed)
      : data_(static_cast<uint8_t *>(aligned_alloc(4096, (size + 4095) / 4096 * 4096))),
        size_(size) {
    if (!data_) throw std::bad_alloc();
    for (uint64_t i = 0; i < size; ++i) data_[i] = static_cast<uint8_t>(i * 131 + seed);
  }
  ~AlignedBuffer() { free(data_); }
  AlignedBuffer(const AlignedBuffer &) = delete;
  AlignedBuffer &operator=(const AlignedBuffer &) = delete;
  uint8_t *data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  uint8_t *data_;
  uint64_t size_;
};

// Tells the compiler that the bytes at `p` are used: a copy into a buffer
// that the next copy overwrites (a warm-up, a timed baseline) may
// otherwise be dropped as a dead store, and never run at all.
inline void Used(const void *p) {
  asm volatile("" : : "r"(p) : "memory");
}

// Evicts [p, p+n) from every level of the CPU's caches, so that the next
// access goes to memory, as one to a chunk written long ago does. Baselines
// and the paths they judge start from the same state this way.
inline void Uncache(const void *p, uint64_t n) {
  InvalidateRange(p, n);
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
int RunCoherence(int argc, char **argv);

}  // namespace maru::bench
