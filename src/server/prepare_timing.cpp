#include "server/prepare_timing.h"

#include <fmt/format.h>

namespace akv {

std::string format_prepare_phases(const PrepareTiming& t) {
  std::string out;
  for (const auto& [name, ms] : t.named()) {
    if (!out.empty()) out += ' ';
    out += fmt::format("{}={:.1f}", name, ms);
  }
  return out;
}

}  // namespace akv
