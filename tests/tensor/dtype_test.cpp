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
