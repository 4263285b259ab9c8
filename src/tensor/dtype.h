// Element types of weights, activations and KV, with conversions to and from f32.
// Quantized types will join this enum with a block size; byte sizes are per element here.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace akv {

enum class DType : std::uint8_t { F32, F16, BF16, F64, I32, I64, U8, I8 };

std::size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // safetensors spelling: "F32", "BF16", ...
std::optional<DType> find_dtype(std::string_view safetensors_name);

inline float bf16_to_f32(std::uint16_t h) { return std::bit_cast<float>(std::uint32_t(h) << 16); }

// Round to nearest even, as torch does; NaN stays NaN.
inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

float f16_to_f32(std::uint16_t h);
std::uint16_t f32_to_f16(float f);

// Converts n elements of `src` (of type t, F32/F16/BF16/F64) to f32.
void convert_to_f32(DType t, const void* src, float* dst, std::size_t n);

}  // namespace akv
