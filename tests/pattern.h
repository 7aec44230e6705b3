// Chunk contents unique to a key, so a reader can tell its own bytes from
// anybody else's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace maru_test {

inline uint64_t PatternSeed(const std::string &key) {
  return std::hash<std::string>{}(key) | 1;
}

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

// A chunk that says which version of which path it is: its first 8 bytes
// hold the version, the rest is the pattern of (path, version). A reader can
// check any chunk against its own path, whatever version it got.
inline void FillVersioned(void *data, uint64_t size, const std::string &path, uint64_t version) {
  *static_cast<uint64_t *>(data) = version;
  FillPattern(static_cast<uint8_t *>(data) + 8, size - 8, path + "#" + std::to_string(version));
}

inline bool CheckVersioned(const void *data, uint64_t size, const std::string &path) {
  const uint64_t version = *static_cast<const uint64_t *>(data);
  return CheckPattern(static_cast<const uint8_t *>(data) + 8, size - 8,
                      path + "#" + std::to_string(version));
}

}  // namespace maru_test
