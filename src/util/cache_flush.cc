#include "util/cache_flush.h"

#include <cstdint>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace maru {
namespace {

constexpr uintptr_t kLine = 64;

enum class Insn { kClwb, kClflushopt, kClflush, kNone };

#if defined(__x86_64__)
Insn Detect() {
  unsigned a, b, c, d;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    if (b & (1u << 24)) return Insn::kClwb;
    if (b & (1u << 23)) return Insn::kClflushopt;
  }
  if (__get_cpuid(1, &a, &b, &c, &d) && (d & (1u << 19))) return Insn::kClflush;
  return Insn::kNone;
}

// Each instruction in a function of its own, compiled for it alone: the
// rest of the build must not assume the CPU has it.
__attribute__((target("clwb"))) void Clwb(uintptr_t from, uintptr_t to) {
  for (uintptr_t a = from; a < to; a += kLine) _mm_clwb(reinterpret_cast<void *>(a));
}
__attribute__((target("clflushopt"))) void Clflushopt(uintptr_t from, uintptr_t to) {
  for (uintptr_t a = from; a < to; a += kLine) _mm_clflushopt(reinterpret_cast<void *>(a));
}
void Clflush(uintptr_t from, uintptr_t to) {
  for (uintptr_t a = from; a < to; a += kLine) _mm_clflush(reinterpret_cast<void *>(a));
}
#else
Insn Detect() {
  return Insn::kNone;
}
#endif

Insn Have() {
  static const Insn insn = Detect();
  return insn;
}

// Lines [from, to) of the range: whole lines, since that is what moves.
void Lines(const void *p, size_t len, uintptr_t *from, uintptr_t *to) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  *from = a & ~(kLine - 1);
  *to = (a + len + kLine - 1) & ~(kLine - 1);
}

}  // namespace

void FlushRange(const void *p, size_t len) {
  uintptr_t from, to;
  Lines(p, len, &from, &to);
#if defined(__x86_64__)
  switch (Have()) {
    case Insn::kClwb:
      Clwb(from, to);
      break;
    case Insn::kClflushopt:
      Clflushopt(from, to);
      break;
    case Insn::kClflush:
      Clflush(from, to);
      break;
    case Insn::kNone:
      break;
  }
  // clwb and clflushopt are ordered only by a fence: the writes a publish
  // announces must be in memory before the announcement is.
  _mm_sfence();
#else
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

void InvalidateRange(const void *p, size_t len) {
  uintptr_t from, to;
  Lines(p, len, &from, &to);
#if defined(__x86_64__)
  // clwb may keep the line: only the flushes drop it.
  if (Have() == Insn::kClwb || Have() == Insn::kClflushopt)
    Clflushopt(from, to);
  else if (Have() == Insn::kClflush)
    Clflush(from, to);
  // Loads after this must not be served from before the flushes: mfence
  // orders clflushopt against the loads that follow (sfence does not).
  _mm_mfence();
#else
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

const char *FlushInstruction() {
  switch (Have()) {
    case Insn::kClwb:
      return "clwb";
    case Insn::kClflushopt:
      return "clflushopt";
    case Insn::kClflush:
      return "clflush";
    case Insn::kNone:
      break;
  }
  return "none";
}

}  // namespace maru
