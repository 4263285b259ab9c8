// FastBackend::matmul against the reference on random inputs: decode (GEMV kernel) and prefill
// (sgemm) row counts, odd sizes, strided inputs and outputs, F32/BF16/F16 weights, bias, on
// every instruction set the CPU has.
//
// Tolerance, every dtype: |fast - ref| <= 1e-5 * sum_k |x_k w_k| + 1e-6 per element. The fast
// path accumulates k products in f32 (the reference in double); BF16/F16 weights widen to f32
// exactly, so the bound does not depend on the weight dtype.
#include <tuple>

#include "parity_util.h"

namespace akv::test {
namespace {

struct MatmulCase {
  std::int64_t n, m, k;
};

class FastMatmul : public ::testing::TestWithParam<std::tuple<Isa, DType>> {};

void check_matmul(Isa isa, DType dtype, MatmulCase c, bool bias, std::int64_t pad, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const OwnedWeight w = random_weight(rng, dtype, c.m, c.k);
  const OwnedWeight b = random_weight(rng, dtype, 1, c.m);
  const OwnedTensor x = random_tensor(rng, c.n, c.k, pad);
  OwnedTensor out_fast = random_tensor(rng, c.n, c.m, pad);
  OwnedTensor out_ref = copy_of(out_fast);

  ReferenceBackend ref;
  FastBackend fast(3, isa);
  ref.matmul(x.ref, w.ref, bias ? &b.ref : nullptr, out_ref.ref);
  fast.matmul(x.ref, w.ref, bias ? &b.ref : nullptr, out_fast.ref);

  const std::vector<float> xs = x.host(), got = out_fast.host(), want = out_ref.host();
  int bad = 0;
  for (std::int64_t r = 0; r < c.n; ++r) {
    for (std::int64_t m = 0; m < c.m; ++m) {
      double mag = 0;
      for (std::int64_t k = 0; k < c.k; ++k)
        mag += std::fabs(double(xs[r * c.k + k]) * load_f32(w.ref.data, dtype, m * c.k + k));
      const double err = std::fabs(double(got[r * c.m + m]) - want[r * c.m + m]);
      if (err > 1e-5 * mag + 1e-6 && bad++ < 5)
        ADD_FAILURE() << "n=" << c.n << " m=" << c.m << " k=" << c.k << " [" << r << "," << m
                      << "] fast " << got[r * c.m + m] << " ref " << want[r * c.m + m];
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_TRUE(padding_intact(out_fast)) << "wrote outside the output view";
}

TEST_P(FastMatmul, MatchesReference) {
  const auto [isa, dtype] = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported by this CPU";
  const MatmulCase cases[] = {{1, 1, 1},    {1, 37, 19},   {1, 64, 576},  {2, 50, 33},
                              {3, 129, 100}, {7, 64, 64},   {8, 64, 64},   {9, 31, 17},
                              {33, 77, 45}, {130, 257, 96}, {64, 40, 1536}};
  std::uint32_t seed = 1;
  for (const MatmulCase& c : cases) {
    check_matmul(isa, dtype, c, /*bias=*/false, /*pad=*/0, seed++);
    check_matmul(isa, dtype, c, /*bias=*/true, /*pad=*/3, seed++);
  }
}

// Large enough that bf16 panels are widened several times per thread.
TEST_P(FastMatmul, ManyWeightPanels) {
  const auto [isa, dtype] = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported by this CPU";
  check_matmul(isa, dtype, {20, 4000, 600}, true, 5, 99);  // ~3 MiB of f32 weights per thread
}

// The GEMV path (fewer than kGemmMinRows inputs) computes each output element on exactly one
// pool thread, whichever chunk of rows it claims: the thread count must not change the result.
TEST_P(FastMatmul, GemvResultDoesNotDependOnThreadCount) {
  const auto [isa, dtype] = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported by this CPU";
  FastBackend one(1, isa), three(3, isa);
  std::mt19937 rng(5);
  const OwnedWeight w = random_weight(rng, dtype, 301, 576);
  for (const std::int64_t n : {1, 3}) {
    const OwnedTensor x = random_tensor(rng, n, 576);
    OwnedTensor out1 = random_tensor(rng, n, 301), out3 = copy_of(out1);
    one.matmul(x.ref, w.ref, nullptr, out1.ref);
    for (int round = 0; round < 3; ++round) {
      three.matmul(x.ref, w.ref, nullptr, out3.ref);
      EXPECT_EQ(out1.host(), out3.host()) << "n=" << n << " round " << round;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(IsaDtype, FastMatmul,
                         ::testing::Combine(::testing::ValuesIn(all_isas()),
                                            ::testing::Values(DType::F32, DType::BF16, DType::F16)),
                         [](const auto& info) {
                           return std::string(isa_name(std::get<0>(info.param))) + "_" +
                                  std::string(dtype_name(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace akv::test
