// Load-time quantization (tensor/quantize.h) against the oracle's dequantization: Q8_0 byte for
// byte against gguf-py's quantizer (testdata/quant_fixture.gguf, README there), and for every
// type the round trip within the half step its rule promises (the bounds below follow from the
// rules in quantize.h: scales rounded up to f16, so no value is clipped).
#include "tensor/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "tensor/dequantize.h"
#include "tensor/gguf.h"

namespace akv {
namespace {

const std::string kFixture = std::string(AGENTKV_TENSOR_TESTDATA) + "/quant_fixture.gguf";

std::vector<float> round_trip(DType t, const std::vector<float>& x) {
  std::vector<std::uint8_t> q(dtype_row_bytes(t, static_cast<std::int64_t>(x.size())));
  quantize_row(t, x, q);
  std::vector<float> y(x.size());
  dequantize(*find_ggml_type_of(t), q, y);
  return y;
}

// Normal values with outliers, an all-zero 32-block and a constant 32-block.
std::vector<float> test_row(std::uint32_t seed, std::size_t n) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = g(rng);
  for (std::size_t i = 13; i < n; i += 97) x[i] *= 30.0f;
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f);
  std::fill(x.begin() + 288, x.begin() + 320, 0.75f);
  return x;
}

float abs_max(const float* x, int n) {
  float m = 0;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

constexpr double kF16Up = 1.0 + 1.0 / 1024;  // an f16 rounded up is at most one ulp (2^-10) higher

TEST(Quantize, Q8_0IsByteExactWithGgufPy) {
  const GgufReader r = GgufReader::open_or_throw(kFixture);
  const GgufTensor& in = r.get_or_throw("input");
  const GgufTensor& want = r.get_or_throw("Q8_0");
  ASSERT_EQ(want.type, GgmlType::Q8_0);
  std::vector<float> x(static_cast<std::size_t>(in.numel()));
  std::memcpy(x.data(), in.bytes.data(), x.size() * 4);
  std::vector<std::uint8_t> got(want.bytes.size());
  quantize_row(DType::Q8_0, x, got);
  ASSERT_EQ(got.size(), want.bytes.size());
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want.bytes[i]) << "byte " << i;
}

TEST(Quantize, Q8_0AndQ5_0WithinHalfAStep) {
  const std::vector<float> x = test_row(1, 1024);
  for (const auto& [t, levels] : {std::pair{DType::Q8_0, 127.0}, std::pair{DType::Q5_0, 15.0}}) {
    const std::vector<float> y = round_trip(t, x);
    for (std::size_t b = 0; b < x.size(); b += 32) {
      // Q8_0 keeps d = amax / 127 unrounded for q and stores it as f16 (|q| <= 127 more);
      // Q5_0 rounds d up to f16 first.
      const double d = abs_max(&x[b], 32) / levels;
      const double bound = t == DType::Q8_0 ? d / 2 + 127 * d / 2048 : d * kF16Up / 2;
      for (std::size_t i = b; i < b + 32; ++i)
        ASSERT_LE(std::fabs(double(y[i]) - x[i]), bound * (1 + 1e-6))
            << dtype_name(t) << " element " << i;
    }
  }
}

TEST(Quantize, Q6_KWithinHalfAStep) {
  const std::vector<float> x = test_row(2, 1024);
  const std::vector<float> y = round_trip(DType::Q6_K, x);
  for (std::size_t b = 0; b < x.size(); b += 256) {
    double s_max = 0;
    for (int j = 0; j < 16; ++j) s_max = std::max(s_max, abs_max(&x[b + 16 * j], 16) / 31.0);
    const double d = s_max / 127 * kF16Up;
    for (int j = 0; j < 16; ++j) {
      // step = d * ceil(s / d) < s + d
      const double bound = (abs_max(&x[b + 16 * j], 16) / 31.0 + d) / 2;
      for (std::size_t i = b + 16 * j; i < b + 16 * j + 16; ++i)
        ASSERT_LE(std::fabs(double(y[i]) - x[i]), bound * (1 + 1e-6)) << "element " << i;
    }
  }
}

TEST(Quantize, Q4_KWithinHalfAStep) {
  const std::vector<float> x = test_row(3, 1024);
  const std::vector<float> y = round_trip(DType::Q4_K, x);
  for (std::size_t b = 0; b < x.size(); b += 256) {
    double m_max = 0, need_max = 0;
    double mn[8], mx[8];
    for (int s = 0; s < 8; ++s) {
      const auto [lo, hi] =
          std::minmax_element(x.begin() + b + 32 * s, x.begin() + b + 32 * s + 32);
      mn[s] = std::max(0.0, -double(*lo));
      mx[s] = *hi;
      m_max = std::max(m_max, mn[s]);
    }
    const double dmin = m_max / 63 * kF16Up;
    for (int s = 0; s < 8; ++s) need_max = std::max(need_max, (mx[s] + mn[s] + dmin) / 15);
    const double d = need_max / 63 * kF16Up;
    for (int s = 0; s < 8; ++s) {
      // the min rounds up by < dmin, the step d * ceil(need / d) < need + d
      const double bound = ((mx[s] + mn[s] + dmin) / 15 + d) / 2;
      for (std::size_t i = b + 32 * s; i < b + 32 * s + 32; ++i)
        ASSERT_LE(std::fabs(double(y[i]) - x[i]), bound * (1 + 1e-5)) << "element " << i;
    }
  }
}

TEST(Quantize, ZeroRowsStayZero) {
  const std::vector<float> x(512, 0.0f);
  for (DType t : {DType::Q8_0, DType::Q5_0, DType::Q6_K, DType::Q4_K})
    for (float v : round_trip(t, x)) ASSERT_EQ(v, 0.0f) << dtype_name(t);
}

}  // namespace
}  // namespace akv
