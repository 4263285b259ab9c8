// --backend NAME -> a Backend: "auto" (the default: "cuda" when the build has the CUDA backend
// and a device is usable, else "cpu"), "reference" (scalar oracle), "cpu" (fast CPU path),
// "cuda" (when built with AGENTKV_CUDA). Throws Error{InvalidArgument} for an unknown or
// unavailable name.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

namespace akv {

std::unique_ptr<Backend> make_backend(const std::string& name, int n_threads);

}  // namespace akv
