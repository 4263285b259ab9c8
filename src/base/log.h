// Human-readable logging to stderr: `log_info("loaded {} tensors", n)`. Thread-safe (one
// write per line). Not for the per-step hot loop: collect numbers there, log them elsewhere.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace akv {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_line(LogLevel level, std::string_view text);

template <typename... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... args) {
  if (log_level() <= LogLevel::Debug) log_line(LogLevel::Debug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  if (log_level() <= LogLevel::Info) log_line(LogLevel::Info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... args) {
  if (log_level() <= LogLevel::Warn) log_line(LogLevel::Warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_error(fmt::format_string<Args...> f, Args&&... args) {
  log_line(LogLevel::Error, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace akv
