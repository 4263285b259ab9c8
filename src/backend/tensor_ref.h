// Non-owning views of backend memory: 2-D row-major tensors with a row stride (so a column
// slice of a fused buffer, such as q out of qkv, is a view too), and weights.
#pragma once

#include <cstdint>

#include "base/check.h"
#include "tensor/dtype.h"

namespace akv {

struct TensorRef {
  void* data = nullptr;  // backend memory (host for CPU, device for CUDA)
  DType dtype = DType::F32;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t stride = 0;  // elements between rows; >= cols

  // Columns [begin, begin + n) of every row.
  TensorRef cols_slice(std::int64_t begin, std::int64_t n) const {
    AKV_CHECK(begin >= 0 && n >= 0 && begin + n <= cols, "column slice out of range");
    return {static_cast<char*>(data) + begin * static_cast<std::int64_t>(dtype_size(dtype)), dtype,
            rows, n, stride};
  }
  // Rows [begin, begin + n).
  TensorRef rows_slice(std::int64_t begin, std::int64_t n) const {
    AKV_CHECK(begin >= 0 && n >= 0 && begin + n <= rows, "row slice out of range");
    return {static_cast<char*>(data) + begin * stride * static_cast<std::int64_t>(dtype_size(dtype)),
            dtype, n, cols, stride};
  }
  template <typename T>
  T* row(std::int64_t r) const {
    return reinterpret_cast<T*>(static_cast<char*>(data) +
                                r * stride * static_cast<std::int64_t>(dtype_size(dtype)));
  }
};

// A weight matrix [rows, cols] (a vector is [1, cols]); `data` is backend memory. For a
// quantized dtype, [rows, cols] is the logical shape and each row is dtype_row_bytes(dtype, cols)
// bytes of whole blocks (quant_blocks.h), rows packed one after another.
struct WeightRef {
  const void* data = nullptr;
  DType dtype = DType::F32;
  std::int64_t rows = 0;
  std::int64_t cols = 0;

  bool empty() const { return data == nullptr; }
};

// Backend memory owned by an object; freeing it is the destructor's job.
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual TensorRef tensor() const = 0;
};

}  // namespace akv
