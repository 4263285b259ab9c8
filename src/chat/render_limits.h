// Bounds on one template render, so a hostile or broken template cannot hang the server or
// exhaust its memory. Exceeding one throws Error(ResourceExhausted) naming the limit.
#pragma once

#include <cstddef>
#include <cstdint>

namespace akv::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;  // the rendered text, and any single string built
  int64_t max_steps = 50'000'000;              // expression evaluations + loop iterations
  int max_call_depth = 64;                     // nested macro calls
};

}  // namespace akv::jinja
