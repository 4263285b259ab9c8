#include "base/check.h"

#include <cstdio>
#include <cstdlib>

namespace akv::detail {

void check_failed(const char* file, int line, const char* cond, std::string_view msg) {
  std::fprintf(stderr, "agentkv: check failed at %s:%d: %s: %.*s\n", file, line, cond,
               static_cast<int>(msg.size()), msg.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace akv::detail
