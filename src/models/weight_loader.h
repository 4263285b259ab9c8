// Looks weights up by their checkpoint names, checks shape and dtype, and hands them to the
// backend. Errors name the checkpoint and the tensor.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "backend/backend.h"
#include "tensor/safetensors.h"

namespace akv {

class WeightLoader {
 public:
  WeightLoader(const SafetensorsReader& reader, Backend& backend, std::string label)
      : reader_(reader), backend_(backend), label_(std::move(label)) {}

  // Throws Error{NotFound} when absent, Error{BadFormat} on a shape mismatch,
  // Error{Unsupported} for a non-float dtype.
  WeightRef get(const std::string& name, std::initializer_list<std::int64_t> shape);
  // An empty WeightRef when absent; checked like get() when present.
  WeightRef get_optional(const std::string& name, std::initializer_list<std::int64_t> shape);
  bool has(const std::string& name) const { return reader_.find(name) != nullptr; }

 private:
  const SafetensorsReader& reader_;
  Backend& backend_;
  std::string label_;
};

}  // namespace akv
