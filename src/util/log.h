// One line per event on stderr, with a level. Under systemd (JOURNAL_STREAM
// set) lines carry the "<N>" priority prefix the journal understands instead
// of a timestamp.
#pragma once

#include <string_view>

namespace maru {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// "error", "warn", "info", "debug"; false if the name is unknown.
bool SetLogLevel(std::string_view name);
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
// Program name printed in front of each line.
void SetLogTag(const char *tag);

void Log(LogLevel level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace maru

#define MARU_LOG(level, ...)                             \
  do {                                                   \
    if (::maru::LogEnabled(::maru::LogLevel::level))     \
      ::maru::Log(::maru::LogLevel::level, __VA_ARGS__); \
  } while (0)
#define LOG_ERROR(...) MARU_LOG(kError, __VA_ARGS__)
#define LOG_WARN(...) MARU_LOG(kWarn, __VA_ARGS__)
#define LOG_INFO(...) MARU_LOG(kInfo, __VA_ARGS__)
#define LOG_DEBUG(...) MARU_LOG(kDebug, __VA_ARGS__)
