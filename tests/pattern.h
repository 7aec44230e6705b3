// Chunk contents unique to a key, so a reader can tell its own bytes from
// anybody else's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace maru_test {

inline uint64_t PatternSeed(const std::string &key) { return std::hash<std::string>{}(key) | 1; }

inline void FillPattern(void *data, uint64_t size, const std::string &key) {
  const uint64_t seed = PatternSeed(key);
  auto *p = static_cast<uint64_t *>(data);
  for (uint64_t i = 0; i < size / 8; ++i) p[i] = seed + i * 0x9e3779b97f4a7c15ull;
}

inline bool CheckPattern(const void *data, uint64_t size, const std::string &key) {
  const uint64_t seed = PatternSeed(key);
  auto *p = static_cast<const uint64_t *>(data);
  for (uint64_t i = 0; i < size / 8; ++i)
    if (p[i] != seed + i * 0x9e3779b97f4a7c15ull) return false;
  return true;
}

}  // namespace maru_test
