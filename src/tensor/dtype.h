// Element types of weights, activations and KV, with conversions to and from f32.
// Plain types have a byte size per element; the quantized weight types (GGUF's block formats)
// have a size per block of elements only: a row of `cols` takes dtype_row_bytes(t, cols).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "tensor/gguf_types.h"

namespace akv {

// Plain types first; then GGUF's quantized block types (weights only: layouts in quant_blocks.h).
enum class DType : std::uint8_t {
  F32, F16, BF16, F64, I32, I64, U8, I8,
  Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4,
};

// Bytes of one element of a plain type; a quantized type has no per-element size (AKV_CHECK).
std::size_t dtype_size(DType t);
// safetensors spelling for plain types ("F32", "BF16", ...), ggml's for quantized ("Q4_K").
std::string_view dtype_name(DType t);
// A plain type by its safetensors name; quantized names are not safetensors dtypes (nullopt).
std::optional<DType> find_dtype(std::string_view safetensors_name);

bool dtype_is_quantized(DType t);
// Block geometry, from GGUF's type traits: 1 element of dtype_size bytes for a plain type,
// 32 or 256 elements of a fixed byte count for a quantized one.
std::int64_t dtype_block_elems(DType t);
std::int64_t dtype_block_bytes(DType t);
// Bytes of a row of `cols` elements; AKV_CHECK that cols is a whole number of blocks.
std::size_t dtype_row_bytes(DType t, std::int64_t cols);

// The ggml tensor type of a DType and back; nullopt where the other enum has no such type
// (U8 has no ggml type, ggml's I16 no DType).
std::optional<GgmlType> find_ggml_type_of(DType t);
std::optional<DType> find_dtype_of(GgmlType t);

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
