// Host memory for the CPU backends: a zero-filled, 64-byte aligned [rows, cols] tensor.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/tensor_ref.h"

namespace akv {

class HostBuffer final : public DeviceBuffer {
 public:
  HostBuffer(DType dtype, std::int64_t rows, std::int64_t cols);
  ~HostBuffer() override;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  TensorRef tensor() const override { return {data_, dtype_, rows_, cols_, cols_}; }

 private:
  void* data_ = nullptr;
  DType dtype_;
  std::int64_t rows_, cols_;
};

// Reads element i of a weight or tensor row of any float dtype as f32.
inline float load_f32(const void* base, DType t, std::int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(base)[i];
    case DType::BF16: return bf16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
    case DType::F16: return f16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
    default: AKV_CHECK(false, "load_f32: not a float dtype");
  }
  return 0.0f;
}

inline void store_f32(void* base, DType t, std::int64_t i, float v) {
  switch (t) {
    case DType::F32: static_cast<float*>(base)[i] = v; return;
    case DType::BF16: static_cast<std::uint16_t*>(base)[i] = f32_to_bf16(v); return;
    case DType::F16: static_cast<std::uint16_t*>(base)[i] = f32_to_f16(v); return;
    default: AKV_CHECK(false, "store_f32: not a float dtype");
  }
}

}  // namespace akv
