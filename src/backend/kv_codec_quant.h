// Internal to kv_codec*.cpp: the int8/int4 slab codec's shared pieces (the stored parameters'
// rounding, a group's fit) and the vectorised slab kernels' table. The reference slab code is in
// kv_codec.cpp; kv_codec_avx2.cpp is byte-equal to it (kv_codec_parity_test).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace akv::kv_codec_detail {

// A group's parameters: bf16 scale, bf16 minimum (little-endian word: scale | minimum << 16).
inline constexpr std::size_t kParamBytes = 4;

// The smallest bf16 >= x and the largest bf16 <= x (finite x), so rounding the stored
// parameters never shrinks a group's range.
inline std::uint16_t bf16_at_least(float x) {
  const auto b = std::bit_cast<std::uint32_t>(x);
  const auto t = static_cast<std::uint16_t>(b >> 16);
  if (bf16_to_f32(t) >= x) return t;
  return static_cast<std::uint16_t>(t + 1);  // positive x truncated below it: one ulp up
}
inline std::uint16_t bf16_at_most(float x) {
  return bf16_at_least(-x) ^ 0x8000;
}

struct GroupParams {
  float scale = 0.0f;
  float min = 0.0f;
};

// The stored parameters of a group whose elements span [lo, hi] (zeros made +0 by the caller,
// so the result does not depend on which zero a reduction met first), written to `params`.
inline GroupParams fit_params(float lo, float hi, int bits, std::byte* params) {
  const auto steps = static_cast<float>((1 << bits) - 1);
  std::uint16_t stored[2];
  stored[1] = bf16_at_most(lo);
  const float min = bf16_to_f32(stored[1]);
  stored[0] = bf16_at_least((hi - min) / steps);
  for (int i = 0; i < 2; ++i) {  // little-endian, as memcpy of the pair on x86
    params[2 * i] = static_cast<std::byte>(stored[i] & 0xFF);
    params[2 * i + 1] = static_cast<std::byte>(stored[i] >> 8);
  }
  return {.scale = bf16_to_f32(stored[0]), .min = min};
}

// One slab [n_tokens, width] of a block in the live dtype, and how it is grouped: keys per
// channel over the slab's tokens, values per token in runs of `value_channels` channels.
struct QuantSlab {
  int bits = 8;  // 8 or 4
  bool keys = true;
  std::int64_t n_tokens = 0, width = 0;
  std::int64_t value_channels = 0;  // values: channels a group spans (width: the whole row)
  DType dtype = DType::F32;
};

// Vectorised kernels. encode: slab `raw` -> `out` (params, then codes); false when it meets an
// element that is not finite or a shape it does not take (width not a multiple of 32, value
// groups of other than 32 or width channels): `out` is then unspecified and the caller runs the
// reference. decode: `in` -> `raw`; false when a stored parameter is not finite or the shape is
// not taken (nothing is promised about `raw` then either).
struct QuantSlabKernels {
  bool (*encode)(const QuantSlab& s, const std::byte* raw, std::byte* out);
  bool (*decode)(const QuantSlab& s, const std::byte* in, std::byte* raw);
  const char* name;
};

// The AVX2 (+F16C) kernels, or null when the CPU lacks them (kv_codec_avx2.cpp).
const QuantSlabKernels* find_quant_slab_kernels_avx2();

}  // namespace akv::kv_codec_detail
