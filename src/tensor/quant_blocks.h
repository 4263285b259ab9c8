// The byte layout of each ggml block type (little-endian, as stored in GGUF), shared by the
// scalar oracle in dequantize.cpp and the fast kernels that must agree with it. f16 fields are
// raw bits (f16_to_f32). Read blocks with memcpy: tensor data need not be aligned to them.
#pragma once

#include <bit>
#include <cstdint>

namespace akv::quant {

static_assert(std::endian::native == std::endian::little, "GGUF blocks are read in place");

constexpr int kQK = 32;    // elements per block of the 32-element types
constexpr int kQK_K = 256;  // elements per k-quant super-block
constexpr int kKScaleBytes = 12;  // packed 6-bit scales and mins of Q4_K/Q5_K

// x = d * (q - 8), q 4-bit; element j < 16 in the low nibble of qs[j], j >= 16 in the high one.
struct BlockQ4_0 { std::uint16_t d; std::uint8_t qs[kQK / 2]; };
// x = d * q + m.
struct BlockQ4_1 { std::uint16_t d, m; std::uint8_t qs[kQK / 2]; };
// x = d * (q - 16), q 5-bit: low nibbles as Q4_0, bit 4 of element j is bit j of qh (u32).
struct BlockQ5_0 { std::uint16_t d; std::uint8_t qh[4]; std::uint8_t qs[kQK / 2]; };
struct BlockQ5_1 { std::uint16_t d, m; std::uint8_t qh[4]; std::uint8_t qs[kQK / 2]; };
// x = d * q, q int8.
struct BlockQ8_0 { std::uint16_t d; std::int8_t qs[kQK]; };
// x = d * kIq4nlValues[q], q 4-bit laid out as Q4_0.
struct BlockIq4Nl { std::uint16_t d; std::uint8_t qs[kQK / 2]; };
// x = e8m0_to_f32_half(e) * kMxfp4Values[q] (e8m0 scale, e2m1 values), q laid out as Q4_0.
struct BlockMxfp4 { std::uint8_t e; std::uint8_t qs[kQK / 2]; };

// 16 sub-blocks of 16: scale (low nibble) and min (high nibble) per sub-block; 2-bit quants.
struct BlockQ2_K { std::uint8_t scales[kQK_K / 16]; std::uint8_t qs[kQK_K / 4]; std::uint16_t d, dmin; };
// 16 sub-blocks of 16, 6-bit signed scales; 2 low bits in qs, the high bit in hmask.
struct BlockQ3_K { std::uint8_t hmask[kQK_K / 8]; std::uint8_t qs[kQK_K / 4]; std::uint8_t scales[12]; std::uint16_t d; };
// 8 sub-blocks of 32, 6-bit scale and min each (packed in 12 bytes); 4-bit quants.
struct BlockQ4_K { std::uint16_t d, dmin; std::uint8_t scales[kKScaleBytes]; std::uint8_t qs[kQK_K / 2]; };
// As Q4_K plus a fifth bit per element in qh.
struct BlockQ5_K { std::uint16_t d, dmin; std::uint8_t scales[kKScaleBytes]; std::uint8_t qh[kQK_K / 8]; std::uint8_t qs[kQK_K / 2]; };
// 16 sub-blocks of 16, int8 scales; 4 low bits in ql, 2 high bits in qh; q - 32.
struct BlockQ6_K { std::uint8_t ql[kQK_K / 2]; std::uint8_t qh[kQK_K / 4]; std::int8_t scales[kQK_K / 16]; std::uint16_t d; };
// 8 sub-blocks of 32, 6-bit signed scales (4 low bits in scales_l, 2 high in scales_h);
// values from kIq4nlValues.
struct BlockIq4Xs { std::uint16_t d; std::uint16_t scales_h; std::uint8_t scales_l[kQK_K / 64]; std::uint8_t qs[kQK_K / 2]; };

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockIq4Nl) == 18 &&
              sizeof(BlockMxfp4) == 17);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockIq4Xs) == 136);

// The non-linear 4-bit codebook of IQ4_NL and IQ4_XS.
inline constexpr std::int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                 1,    13,   25,  38,  53,  69,  89,  113};
// e2m1 (FP4) values, doubled so that they are integers; the scale is halved to match.
inline constexpr std::int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// An e8m0 exponent byte as 2^(e-127) / 2 in f32 (half the MX scale, for the doubled values).
inline float e8m0_to_f32_half(std::uint8_t e) {
  const std::uint32_t bits = e < 2 ? 0x00200000u << e : std::uint32_t(e - 1) << 23;
  return std::bit_cast<float>(bits);
}

}  // namespace akv::quant
