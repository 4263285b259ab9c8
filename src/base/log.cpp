#include "base/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace akv {

namespace {
std::atomic<LogLevel> g_level{LogLevel::Info};

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::Debug: return "debug";
    case LogLevel::Info: return "info";
    case LogLevel::Warn: return "warn";
    case LogLevel::Error: return "error";
  }
  return "?";
}
}  // namespace

void set_log_level(LogLevel level) { g_level.store(level); }
LogLevel log_level() { return g_level.load(std::memory_order_relaxed); }

void log_line(LogLevel level, std::string_view text) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
  // One fprintf per line keeps lines from different threads whole.
  std::fprintf(stderr, "%s.%03dZ %s %.*s\n", stamp, static_cast<int>(ms), level_name(level),
               static_cast<int>(text.size()), text.data());
}

}  // namespace akv
