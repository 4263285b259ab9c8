// RoPE frequency tables against values worked out by hand from the transformers formulas.
#include "models/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

namespace akv {
namespace {

TEST(Rope, DefaultAndLinear) {
  RopeConfig r;
  r.theta = 10000.0;
  RopeFrequencies f = rope_frequencies(r, 8, 128, 1);
  ASSERT_EQ(f.inv_freq.size(), 4u);
  EXPECT_DOUBLE_EQ(f.inv_freq[0], 1.0);
  EXPECT_NEAR(f.inv_freq[1], 1.0 / std::pow(10000.0, 2.0 / 8.0), 1e-15);
  r.type = RopeType::Linear;
  r.factor = 4.0;
  f = rope_frequencies(r, 8, 128, 1);
  EXPECT_NEAR(f.inv_freq[1], 0.25 / std::pow(10000.0, 2.0 / 8.0), 1e-15);
}

TEST(Rope, PartialRotary) {
  RopeConfig r;
  r.partial_rotary_factor = 0.5;
  const RopeFrequencies f = rope_frequencies(r, 16, 128, 1);
  EXPECT_EQ(f.rotary_dim, 8);
  EXPECT_EQ(f.inv_freq.size(), 4u);
}

TEST(Rope, Llama3KeepsHighFrequenciesAndScalesLowOnes) {
  RopeConfig r;
  r.type = RopeType::Llama3;
  r.theta = 500000.0;
  r.factor = 8.0;
  r.original_max_position = 8192;
  RopeConfig plain;
  plain.theta = 500000.0;
  const RopeFrequencies base = rope_frequencies(plain, 128, 131072, 1);
  const RopeFrequencies f = rope_frequencies(r, 128, 131072, 1);
  EXPECT_DOUBLE_EQ(f.inv_freq[0], base.inv_freq[0]);               // wavelength 2*pi: untouched
  EXPECT_DOUBLE_EQ(f.inv_freq[63], base.inv_freq[63] / 8.0);       // longest wavelength: / factor
  for (std::size_t i = 0; i < f.inv_freq.size(); ++i) {
    EXPECT_LE(f.inv_freq[i], base.inv_freq[i]);
    EXPECT_GE(f.inv_freq[i], base.inv_freq[i] / 8.0 - 1e-18);
  }
}

TEST(Rope, DynamicChangesOnlyPastTheOriginalLength) {
  RopeConfig r;
  r.type = RopeType::Dynamic;
  r.factor = 2.0;
  const RopeFrequencies short_seq = rope_frequencies(r, 8, 100, 50);
  const RopeFrequencies long_seq = rope_frequencies(r, 8, 100, 400);
  EXPECT_DOUBLE_EQ(short_seq.inv_freq[1], 1.0 / std::pow(10000.0, 0.25));
  // base' = base * (factor * 400/100 - 1)^(8/6)
  const double base = 10000.0 * std::pow(2.0 * 4.0 - 1.0, 8.0 / 6.0);
  EXPECT_NEAR(long_seq.inv_freq[1], 1.0 / std::pow(base, 0.25), 1e-15);
  EXPECT_TRUE(rope_depends_on_length(r));
}

TEST(Rope, YarnAttentionFactorAndRamp) {
  RopeConfig r;
  r.type = RopeType::Yarn;
  r.factor = 4.0;
  r.original_max_position = 4096;
  const RopeFrequencies f = rope_frequencies(r, 64, 16384, 1);
  EXPECT_NEAR(f.attention_scaling, 0.1 * std::log(4.0) + 1.0, 1e-15);
  const RopeFrequencies base = rope_frequencies(RopeConfig{}, 64, 16384, 1);
  EXPECT_DOUBLE_EQ(f.inv_freq[0], base.inv_freq[0]);            // high frequency: extrapolated
  EXPECT_NEAR(f.inv_freq[31], base.inv_freq[31] / 4.0, 1e-18);  // low frequency: interpolated
}

TEST(Rope, LongRopeSwitchesFactorsPastOriginalLength) {
  RopeConfig r;
  r.type = RopeType::LongRope;
  r.original_max_position = 100;
  r.short_factor = {1.0, 1.0};
  r.long_factor = {2.0, 4.0};
  const RopeFrequencies s = rope_frequencies(r, 4, 400, 50);
  const RopeFrequencies l = rope_frequencies(r, 4, 400, 150);
  EXPECT_DOUBLE_EQ(s.inv_freq[1], 1.0 / 100.0);
  EXPECT_DOUBLE_EQ(l.inv_freq[1], 1.0 / (4.0 * 100.0));
  EXPECT_NEAR(s.attention_scaling, std::sqrt(1.0 + std::log(4.0) / std::log(100.0)), 1e-15);
}

}  // namespace
}  // namespace akv
