// --backend NAME -> a Backend: "reference" (scalar oracle), "cpu" (fast CPU path, default),
// "cuda" (when built with AGENTKV_CUDA). Throws Error{InvalidArgument} for an unknown or
// unavailable name.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

namespace akv {

std::unique_ptr<Backend> make_backend(const std::string& name, int n_threads);

}  // namespace akv
