// The scalar dequantization oracle against gguf-py's numpy dequantizers, bit for bit, on the
// committed fixture (random blocks of every type; tests/tensor/testdata/README.md says how it
// was made), plus the contract checks of dequantize().
#include "tensor/dequantize.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "tensor/dtype.h"
#include "tensor/gguf.h"
#include "tensor/quant_blocks.h"

namespace akv {
namespace {

const std::string kFixture = std::string(AGENTKV_TENSOR_TESTDATA) + "/dequant_fixture.gguf";

std::vector<float> f32_values(const GgufTensor& t) {
  EXPECT_EQ(t.type, GgmlType::F32);
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  std::memcpy(v.data(), t.bytes.data(), v.size() * 4);
  return v;
}

TEST(Dequantize, BitExactWithGgufPyOnEveryType) {
  const GgufReader r = GgufReader::open_or_throw(kFixture);
  const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,   GgmlType::Q4_0,
                            GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,   GgmlType::Q8_0,
                            GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,   GgmlType::Q5_K,
                            GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4};
  for (GgmlType type : types) {
    const std::string name(ggml_type_name(type));
    SCOPED_TRACE(name);
    const GgufTensor& q = r.get_or_throw(name);
    ASSERT_EQ(q.type, type);
    const std::vector<float> want = f32_values(r.get_or_throw(name + ".f32"));
    const std::vector<float> got = dequantize_tensor(q);
    ASSERT_EQ(got.size(), want.size());
    std::size_t n_diff = 0, first = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i]) && n_diff++ == 0) first = i;
    }
    EXPECT_EQ(n_diff, 0u) << "first difference at " << first << ": " << got[first] << " vs " << want[first];
    // Not a trivial fixture: values vary and are finite.
    float lo = want[0], hi = want[0];
    for (float v : want) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      EXPECT_TRUE(std::isfinite(v));
    }
    EXPECT_LT(lo, hi);
  }
}

TEST(Dequantize, RowByRowEqualsWholeTensor) {
  const GgufReader r = GgufReader::open_or_throw(kFixture);
  const GgufTensor& q = r.get_or_throw("Q4_K");
  const std::vector<float> whole = dequantize_tensor(q);
  const GgmlTypeTraits tr = ggml_type_traits(q.type);
  const std::size_t row_bytes = static_cast<std::size_t>(q.row_elems() / tr.block_elems * tr.block_bytes);
  std::vector<float> row(static_cast<std::size_t>(q.row_elems()));
  for (std::int64_t i = 0; i < q.n_rows(); ++i) {
    dequantize(q.type, q.bytes.subspan(static_cast<std::size_t>(i) * row_bytes, row_bytes), row);
    EXPECT_EQ(0, std::memcmp(row.data(), whole.data() + i * q.row_elems(), row.size() * 4)) << i;
  }
}

TEST(Dequantize, HandWrittenBlocks) {
  // Q8_0: d = 0.5, q = -3 -> -1.5.
  quant::BlockQ8_0 b8{};
  b8.d = f32_to_f16(0.5f);
  for (int j = 0; j < 32; ++j) b8.qs[j] = static_cast<std::int8_t>(j - 3);
  std::vector<float> y(32);
  dequantize(GgmlType::Q8_0, {reinterpret_cast<const std::uint8_t*>(&b8), sizeof b8}, y);
  EXPECT_EQ(y[0], -1.5f);
  EXPECT_EQ(y[31], 14.0f);
  // MXFP4: e = 128 -> scale 2^1 / 2 = 1; code 7 -> 12 (doubled 6.0), code 9 -> -1.
  quant::BlockMxfp4 bm{};
  bm.e = 128;
  bm.qs[0] = 0x97;  // element 0 = 7, element 16 = 9
  dequantize(GgmlType::MXFP4, {reinterpret_cast<const std::uint8_t*>(&bm), sizeof bm}, y);
  EXPECT_EQ(y[0], 12.0f);
  EXPECT_EQ(y[16], -1.0f);
  EXPECT_EQ(y[1], 0.0f);
}

}  // namespace
}  // namespace akv
