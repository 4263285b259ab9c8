// Looks weights up by their checkpoint names, checks shape and dtype, and hands them to the
// backend. Errors name the checkpoint and the tensor.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "tensor/safetensors.h"

namespace akv {

class WeightLoader {
 public:
  WeightLoader(const SafetensorsReader& reader, Backend& backend, std::string label)
      : reader_(reader), backend_(backend), label_(std::move(label)) {}

  // Throws Error{NotFound} when absent, Error{BadFormat} on a shape mismatch,
  // Error{Unsupported} for a dtype other than F32/BF16/F16 or, for a matrix, a quantized dtype
  // the backend takes (Backend::takes_quantized_weight).
  WeightRef get(const std::string& name, std::initializer_list<std::int64_t> shape);
  // An empty WeightRef when absent; checked like get() when present.
  WeightRef get_optional(const std::string& name, std::initializer_list<std::int64_t> shape);
  bool has(const std::string& name) const { return reader_.find(name) != nullptr; }

  // get(), converted to F32 at load when stored narrower (small vectors a kernel wants in f32).
  WeightRef get_f32(const std::string& name, std::initializer_list<std::int64_t> shape);
  // The checkpoint tensor itself, shape-checked like get(), for weights a family repacks
  // (stacks, transposes) before upload_repacked. Any dtype.
  const TensorInfo& tensor(const std::string& name, std::initializer_list<std::int64_t> shape) const;
  // A U8 tensor (MXFP4 blocks or scales) uploaded as it is, as [shape[0] * ... , last dims]:
  // rows = the product of the first `row_dims` dims, cols = the product of the rest.
  // Error{BadFormat} when it is not U8 or the shape differs.
  WeightRef get_bytes(const std::string& name, std::initializer_list<std::int64_t> shape, std::size_t row_dims);
  // Uploads `bytes` (a [rows, cols] matrix of `dtype` the family built from checkpoint tensors)
  // as weight `name`; the loader keeps the bytes as long as it lives when the backend points into
  // them (CPU), and frees them at once when it copied them (GPU).
  WeightRef upload_repacked(const std::string& name, DType dtype, std::int64_t rows, std::int64_t cols,
                            std::vector<std::uint8_t> bytes);
  // Uploads `bytes`, a [rows, cols] matrix of `dtype` that lives as long as the checkpoint (such
  // as neighbouring tensors of its mapping), as weight `name`: zero copy where the backend allows.
  WeightRef upload_view(const std::string& name, DType dtype, std::int64_t rows, std::int64_t cols,
                        std::span<const std::uint8_t> bytes);

 private:
  const SafetensorsReader& reader_;
  Backend& backend_;
  std::string label_;
  std::vector<std::unique_ptr<std::vector<std::uint8_t>>> repacked_;
};

}  // namespace akv
