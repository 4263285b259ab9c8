// Helpers for the fast-vs-reference parity tests: random host tensors and weights of any float
// dtype, and views that are strided column slices of wider buffers.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/fast_backend.h"
#include "backend/cpu/host_buffer.h"

namespace akv::test {

// The instruction sets to test on this CPU (unsupported ones are skipped by the test body).
inline std::vector<Isa> all_isas() { return {Isa::Scalar, Isa::Avx2, Isa::Avx512}; }

// A weight [rows, cols] whose bytes the object owns; values drawn from U(-1, 1) * amp.
struct OwnedWeight {
  std::vector<std::uint8_t> bytes;
  WeightRef ref;
};

inline OwnedWeight random_weight(std::mt19937& rng, DType dtype, std::int64_t rows, std::int64_t cols,
                                 float amp = 1.0f) {
  std::uniform_real_distribution<float> u(-amp, amp);
  OwnedWeight w;
  w.bytes.resize(static_cast<std::size_t>(rows * cols) * dtype_size(dtype));
  for (std::int64_t i = 0; i < rows * cols; ++i) store_f32(w.bytes.data(), dtype, i, u(rng));
  w.ref = {w.bytes.data(), dtype, rows, cols};
  return w;
}

// An F32 tensor [rows, cols] that is columns [pad, pad + cols) of a [rows, cols + 2 pad] buffer
// when pad > 0 (a strided view), filled from U(-amp, amp); the padding holds sentinel values.
struct OwnedTensor {
  std::unique_ptr<HostBuffer> buffer;
  TensorRef ref;
  std::vector<float> host() const {
    std::vector<float> h(static_cast<std::size_t>(ref.rows * ref.cols));
    for (std::int64_t r = 0; r < ref.rows; ++r)
      for (std::int64_t c = 0; c < ref.cols; ++c) h[r * ref.cols + c] = ref.row<float>(r)[c];
    return h;
  }
};

inline OwnedTensor random_tensor(std::mt19937& rng, std::int64_t rows, std::int64_t cols,
                                 std::int64_t pad = 0, float amp = 1.0f) {
  std::uniform_real_distribution<float> u(-amp, amp);
  OwnedTensor t;
  t.buffer = std::make_unique<HostBuffer>(DType::F32, rows, cols + 2 * pad);
  TensorRef whole = t.buffer->tensor();
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < whole.cols; ++c) whole.row<float>(r)[c] = (c < pad || c >= pad + cols) ? 1e30f : u(rng);
  t.ref = whole.cols_slice(pad, cols);
  return t;
}

// Same shape and stride as `like`, contents copied (so each backend gets its own in/out copy).
inline OwnedTensor copy_of(const OwnedTensor& like) {
  OwnedTensor t;
  TensorRef src = like.buffer->tensor();
  t.buffer = std::make_unique<HostBuffer>(DType::F32, src.rows, src.cols);
  TensorRef dst = t.buffer->tensor();
  for (std::int64_t r = 0; r < src.rows; ++r)
    for (std::int64_t c = 0; c < src.cols; ++c) dst.row<float>(r)[c] = src.row<float>(r)[c];
  const auto offset = static_cast<const char*>(like.ref.data) - static_cast<const char*>(src.data);
  t.ref = like.ref;
  t.ref.data = static_cast<char*>(dst.data) + offset;
  return t;
}

// True when every padding element of a strided tensor still holds its sentinel.
inline bool padding_intact(const OwnedTensor& t) {
  TensorRef whole = t.buffer->tensor();
  const auto pad = (static_cast<const char*>(t.ref.data) - static_cast<const char*>(whole.data)) /
                   static_cast<std::ptrdiff_t>(sizeof(float));
  for (std::int64_t r = 0; r < whole.rows; ++r)
    for (std::int64_t c = 0; c < whole.cols; ++c)
      if ((c < pad || c >= pad + t.ref.cols) && whole.row<float>(r)[c] != 1e30f) return false;
  return true;
}

}  // namespace akv::test
