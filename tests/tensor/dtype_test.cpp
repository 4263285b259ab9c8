// dtype conversions: bf16 and f16 against hand-computed bit patterns, round trips, ties,
// subnormals, infinities and NaN.
#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace akv {
namespace {

float bits_f32(std::uint32_t u) {
  return std::bit_cast<float>(u);
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32, DType::I64,
                  DType::U8, DType::I8})
    EXPECT_EQ(find_dtype(dtype_name(t)), t);
  EXPECT_FALSE(find_dtype("F8_E4M3").has_value());
  EXPECT_FALSE(find_dtype("bf16").has_value());
}

constexpr DType kQuantized[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0,   DType::Q5_1,   DType::Q8_0,
                                DType::Q2_K, DType::Q3_K, DType::Q4_K,   DType::Q5_K,   DType::Q6_K,
                                DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4};

TEST(DType, QuantizedGeometryComesFromGgmlTraits) {
  for (DType t : kQuantized) {
    EXPECT_TRUE(dtype_is_quantized(t)) << dtype_name(t);
    const auto g = find_ggml_type_of(t);
    ASSERT_TRUE(g.has_value()) << dtype_name(t);
    EXPECT_EQ(find_dtype_of(*g), t);
    EXPECT_EQ(dtype_name(t), ggml_type_name(*g));
    EXPECT_EQ(dtype_block_elems(t), ggml_type_traits(*g).block_elems);
    EXPECT_EQ(dtype_block_bytes(t), ggml_type_traits(*g).block_bytes);
    // Quantized names are not safetensors dtypes.
    EXPECT_FALSE(find_dtype(dtype_name(t)).has_value()) << dtype_name(t);
  }
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32, DType::I64,
                  DType::U8, DType::I8}) {
    EXPECT_FALSE(dtype_is_quantized(t));
    EXPECT_EQ(dtype_block_elems(t), 1);
    EXPECT_EQ(dtype_block_bytes(t), static_cast<std::int64_t>(dtype_size(t)));
  }
  // Hand-checked against the block structs: 4096 columns of Q4_K = 16 blocks of 144 bytes.
  EXPECT_EQ(dtype_row_bytes(DType::Q4_K, 4096), 16u * 144u);
  EXPECT_EQ(dtype_row_bytes(DType::Q8_0, 64), 2u * 34u);
  EXPECT_EQ(dtype_row_bytes(DType::Q6_K, 256), 210u);
  EXPECT_EQ(dtype_row_bytes(DType::MXFP4, 32), 17u);
  EXPECT_EQ(dtype_row_bytes(DType::BF16, 3), 6u);
  EXPECT_FALSE(find_ggml_type_of(DType::U8).has_value());
  EXPECT_FALSE(find_dtype_of(GgmlType::I16).has_value());
  EXPECT_EQ(find_dtype_of(GgmlType::BF16), DType::BF16);
}

TEST(DTypeDeathTest, QuantizedHasNoElementSize) {
  EXPECT_DEATH((void)dtype_size(DType::Q4_K), "quantized dtype has no element size");
  EXPECT_DEATH((void)dtype_row_bytes(DType::Q8_0, 33), "whole number of blocks");
}

TEST(DType, Bf16EveryPatternRoundTrips) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_f32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_bf16(f), h) << std::hex << h;
  }
}

TEST(DType, Bf16RoundsToNearestEven) {
  // 1.0 = 0x3f800000; halfway to the next bf16 (0x3f81) is 0x3f808000.
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f808000u)), 0x3f80u);              // tie, even stays
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f818000u)), 0x3f82u);              // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f808001u)), 0x3f81u);              // above half
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f807fffu)), 0x3f80u);              // below half
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80u);  // overflows to inf
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80u);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x00000001u)), 0x0000u);        // smallest f32 subnormal -> 0
  EXPECT_EQ(f32_to_bf16(bits_f32(0x00018000u)), 0x0002u);        // subnormal tie to even
  const std::uint16_t nan = f32_to_bf16(bits_f32(0x7f800001u));  // NaN payload in low bits
  EXPECT_TRUE(std::isnan(bf16_to_f32(nan)));
}

TEST(DType, F16EveryPatternRoundTrips) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f)))) << std::hex << h;
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

TEST(DType, F16KnownValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00u);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000u);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bffu);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bffu);  // below the rounding point to inf
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00u);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00u);
  EXPECT_EQ(f16_to_f32(0x0001u), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03ffu), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x8000u), -0.0f);
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000u)));
}

TEST(DType, F16RoundsToNearestEven) {
  const float ulp1 = std::ldexp(1.0f, -10);             // spacing of f16 just above 1.0
  EXPECT_EQ(f32_to_f16(1.0f + ulp1 / 2), 0x3c00u);      // tie, even stays
  EXPECT_EQ(f32_to_f16(1.0f + 3 * ulp1 / 2), 0x3c02u);  // tie, odd rounds up
  EXPECT_EQ(f32_to_f16(1.0f + ulp1 * 0.51f), 0x3c01u);
  const float sub = std::ldexp(1.0f, -24);     // subnormal spacing
  EXPECT_EQ(f32_to_f16(sub / 2), 0x0000u);     // tie to even (0)
  EXPECT_EQ(f32_to_f16(sub * 1.5f), 0x0002u);  // tie to even (2)
  EXPECT_EQ(f32_to_f16(sub * 0.51f), 0x0001u);
  EXPECT_EQ(f32_to_f16(std::ldexp(1023.5f, -24)), 0x0400u);  // rounds up into the normals
  EXPECT_EQ(f32_to_f16(-sub), 0x8001u);
}

TEST(DType, ConvertToF32) {
  const std::uint16_t bf[3] = {0x3f80, 0xc000, 0x7f80};
  float out[3];
  convert_to_f32(DType::BF16, bf, out, 3);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_TRUE(std::isinf(out[2]));
  const std::uint16_t h[2] = {0x3c00, 0x3555};
  convert_to_f32(DType::F16, h, out, 2);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_NEAR(out[1], 1.0f / 3, 1e-3);
  const double d[1] = {0.25};
  convert_to_f32(DType::F64, d, out, 1);
  EXPECT_EQ(out[0], 0.25f);
}

}  // namespace
}  // namespace akv
