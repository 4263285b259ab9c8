// Weights a family derives from checkpoint tensors at load time: rows picked or reordered (a
// fused projection split into its parts, per-group interleaving undone) or a tensor seen as a
// matrix (a [C, 1, K] conv kernel as [C, K]). Owns the new host bytes, which zero-copy
// backends keep pointing at: it must outlive the weights it hands out.
#pragma once

#include <cstdint>
#include <deque>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "tensor/safetensors.h"

namespace akv {

class DerivedWeights {
 public:
  DerivedWeights(const SafetensorsReader& reader, Backend& backend)
      : reader_(reader), backend_(backend) {}

  // The matrix [rows.size(), cols] whose row i is row rows[i] of tensor `name` seen as
  // [shape[0], cols] (cols = the product of the other dims); a quantized matrix of a type the
  // backend takes keeps its blocks. Throws Error like WeightLoader::get (missing tensor, shape
  // mismatch, a dtype the backend does not take).
  WeightRef rows_of(const std::string& name, std::initializer_list<std::int64_t> shape,
                    std::span<const std::int64_t> rows);
  // Every row, as a matrix [shape[0], cols].
  WeightRef as_matrix(const std::string& name, std::initializer_list<std::int64_t> shape);

 private:
  const SafetensorsReader& reader_;
  Backend& backend_;
  std::deque<std::vector<std::uint8_t>> bytes_;
  std::deque<TensorInfo> infos_;
};

// [begin, begin + n) as a list of row indices.
std::vector<std::int64_t> row_range(std::int64_t begin, std::int64_t n);

}  // namespace akv
