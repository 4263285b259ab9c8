// AKV_CHECK(cond, msg): an always-on invariant check. A failure is a bug in agentkv, not bad
// input: it prints file:line and the message to stderr and aborts.
#pragma once

#include <string_view>

namespace akv::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, std::string_view msg);
}  // namespace akv::detail

#define AKV_CHECK(cond, msg)                                           \
  do {                                                                 \
    if (!(cond)) [[unlikely]]                                          \
      ::akv::detail::check_failed(__FILE__, __LINE__, #cond, (msg));   \
  } while (0)
