#include "log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "clock.h"

namespace maru {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
const char *g_tag = "maru";

bool UnderJournal() {
  static const bool journal = getenv("JOURNAL_STREAM") != nullptr;
  return journal;
}

}  // namespace

bool SetLogLevel(std::string_view name) {
  static constexpr std::string_view kNames[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; ++i) {
    if (name == kNames[i]) {
      g_level = i;
      return true;
    }
  }
  return false;
}

void SetLogLevel(LogLevel level) {
  g_level = static_cast<int>(level);
}
bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) <= g_level.load();
}
void SetLogTag(const char *tag) {
  g_tag = tag;
}

void Log(LogLevel level, const char *fmt, ...) {
  static constexpr const char *kLabels[] = {"error", "warn", "info", "debug"};
  static constexpr int kSyslogPriority[] = {3, 4, 6, 7};
  char message[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof(message), fmt, ap);
  va_end(ap);
  const int l = static_cast<int>(level);
  if (UnderJournal()) {
    fprintf(stderr, "<%d>%s: %s\n", kSyslogPriority[l], kLabels[l], message);
    return;
  }
  const int64_t now_ns = RealtimeNs();
  const time_t seconds = static_cast<time_t>(now_ns / 1000000000);
  tm local;
  localtime_r(&seconds, &local);
  char when[32];
  strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &local);
  fprintf(stderr, "%s.%03ld %s %s: %s\n", when, static_cast<long>(now_ns % 1000000000 / 1000000),
          g_tag, kLabels[l], message);
}

}  // namespace maru
