// Device-side reading of GGUF blocks (layouts in tensor/quant_blocks.h), shared by the quantized
// GEMV and the dequantizer: per-type geometry, unaligned 32-bit reads, f16 and e8m0 scales.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "tensor/gguf_types.h"

namespace akv::cuda::quant {

// Geometry of a block type: kElems elements in kBytes bytes.
template <GgmlType T>
struct Geometry;
template <> struct Geometry<GgmlType::Q8_0> { static constexpr int kElems = 32, kBytes = 34; };
template <> struct Geometry<GgmlType::Q4_0> { static constexpr int kElems = 32, kBytes = 18; };
template <> struct Geometry<GgmlType::MXFP4> { static constexpr int kElems = 32, kBytes = 17; };
template <> struct Geometry<GgmlType::Q4_K> { static constexpr int kElems = 256, kBytes = 144; };
template <> struct Geometry<GgmlType::Q5_K> { static constexpr int kElems = 256, kBytes = 176; };
template <> struct Geometry<GgmlType::Q6_K> { static constexpr int kElems = 256, kBytes = 210; };

// 4 bytes at p, any alignment; reads the aligned words around them (both must be readable).
// An aligned p (Q4_K/Q5_K rows, whose blocks are 16-byte multiples) costs one load.
__device__ __forceinline__ std::uint32_t ld_u32(const std::uint8_t* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const auto* w = reinterpret_cast<const std::uint32_t*>(a & ~std::uintptr_t{3});
  const unsigned shift = static_cast<unsigned>(a & 3) * 8;
  const std::uint32_t lo = w[0];
  if (shift == 0) return lo;
  return __funnelshift_r(lo, w[1], shift);
}

__device__ __forceinline__ float f16_at(const std::uint8_t* p) {
  const std::uint16_t bits = static_cast<std::uint16_t>(p[0] | (p[1] << 8));
  return __half2float(__ushort_as_half(bits));
}

// An e8m0 exponent as 2^(e-127) / 2 (quant_blocks.h: e8m0_to_f32_half).
__device__ __forceinline__ float e8m0_half(std::uint8_t e) {
  const std::uint32_t bits = e < 2 ? 0x00200000u << e : std::uint32_t(e - 1) << 23;
  return __uint_as_float(bits);
}

// Scale and min of sub-block s (0..7) from the 12 packed bytes of Q4_K/Q5_K.
__device__ __forceinline__ void k_scale_min(const std::uint8_t* sc, int s, int& scale, int& min) {
  if (s < 4) {
    scale = sc[s] & 0x3f;
    min = sc[s + 4] & 0x3f;
  } else {
    scale = (sc[s + 4] & 0xf) | ((sc[s - 4] >> 2) & 0x30);
    min = (sc[s + 4] >> 4) | ((sc[s] >> 2) & 0x30);
  }
}

}  // namespace akv::cuda::quant
