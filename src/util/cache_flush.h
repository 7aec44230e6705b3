// Cache-line write-back and invalidation, for memory that the hardware does
// not keep coherent between hosts (a pool with `--coherence flush`; see
// docs/design.md, "Coherence"). The instruction is picked once, at first
// use, from what the CPU has (cpuid): clwb (writes back, may keep the line),
// else clflushopt, else clflush.
#pragma once

#include <cstddef>

namespace maru {

// Writes the lines of [p, p+len) back to memory, then fences (sfence): once
// it returns, another host that reads memory sees the bytes.
void FlushRange(const void *p, size_t len);
// Drops the lines of [p, p+len) from this CPU's caches, then fences
// (mfence), so that the loads after it read memory: what another host
// wrote since, not a stale copy.
void InvalidateRange(const void *p, size_t len);
// The instruction FlushRange uses: "clwb", "clflushopt" or "clflush".
const char *FlushInstruction();

}  // namespace maru
