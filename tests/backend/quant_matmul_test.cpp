// Quantized-weight matmul of the CPU backends against the scalar dequantization oracle, every
// GGUF block type on every instruction set: the reference backend, the fast backend's integer
// kernels (Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K on AVX2 / AVX-512 VNNI) and its dequantized-row
// fallback (the other types, and every type on Scalar). The expected value is
// sum_k x_k * dequantize(w)_k in double.
//
// Tolerances:
// - inputs on the int8 grid (x = 2^-6 q, q integer, |q| <= 127, 127 in every 32-block): the
//   input quantization is exact, so the integer kernels may differ only by f32 rounding of the
//   per-block scale products and sums: |got - want| <= 1e-5 * sum_k |x_k w_k| + 1e-6;
// - arbitrary inputs: each x_k is rounded to the nearest multiple of d_b = max|x| over its
//   block / 127 (blocks of 32, or 256 for the k-quants), an error of at most d_b / 2, so
//   |got - want| <= sum_k |w_k| d_b(k) / 2 + the f32 term above. The fallback does not
//   quantize inputs and is held to the f32 term alone.
#include <cstddef>
#include <cstring>
#include <string>
#include <tuple>

#include "backend/cpu/quant_dot.h"
#include "backend/cpu/reference_backend.h"
#include "parity_util.h"
#include "tensor/dequantize.h"
#include "tensor/quant_blocks.h"

namespace akv::test {
namespace {

using namespace quant;

constexpr DType kTypes[] = {DType::Q4_0,   DType::Q4_1,   DType::Q5_0, DType::Q5_1, DType::Q8_0,
                            DType::Q2_K,   DType::Q3_K,   DType::Q4_K, DType::Q5_K, DType::Q6_K,
                            DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4};

void put_f16(std::uint8_t* p, float v) {
  const std::uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// Random blocks: uniform random bytes, then each block's scale fields set to moderate values
// (scales in [0.002, 0.02], mins below them) so every type's values are of order 0.1.
OwnedWeight random_quant_weight(std::mt19937& rng, DType t, std::int64_t rows, std::int64_t cols) {
  OwnedWeight w;
  const std::size_t row_bytes = dtype_row_bytes(t, cols);
  w.bytes.resize(row_bytes * static_cast<std::size_t>(rows));
  for (auto& b : w.bytes) b = static_cast<std::uint8_t>(rng());
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  const auto block_bytes = static_cast<std::size_t>(dtype_block_bytes(t));
  for (std::size_t off = 0; off < w.bytes.size(); off += block_bytes) {
    std::uint8_t* b = w.bytes.data() + off;
    switch (t) {
      case DType::Q4_1:
      case DType::Q5_1:
        put_f16(b + 2, -8 * scale(rng));
        [[fallthrough]];
      case DType::Q4_0:
      case DType::Q5_0:
      case DType::Q8_0:
      case DType::IQ4_NL:
      case DType::IQ4_XS:
        put_f16(b, t == DType::Q8_0 || t == DType::IQ4_NL || t == DType::IQ4_XS ? scale(rng) / 8
                                                                                : scale(rng));
        break;
      case DType::MXFP4:
        b[0] = static_cast<std::uint8_t>(120 + rng() % 4);
        break;
      case DType::Q2_K:
        put_f16(b + offsetof(BlockQ2_K, d), scale(rng));
        put_f16(b + offsetof(BlockQ2_K, dmin), scale(rng));
        break;
      case DType::Q3_K:
        put_f16(b + offsetof(BlockQ3_K, d), scale(rng) / 4);
        break;
      case DType::Q4_K:
      case DType::Q5_K:
        put_f16(b, scale(rng) / 8);
        put_f16(b + 2, scale(rng) / 8);
        break;
      case DType::Q6_K:
        put_f16(b + offsetof(BlockQ6_K, d), scale(rng) / 64);
        break;
      default:
        ADD_FAILURE() << "not a quantized type";
    }
  }
  w.ref = {w.bytes.data(), t, rows, cols};
  return w;
}

std::vector<float> dequantized(const WeightRef& w) {
  std::vector<float> v(static_cast<std::size_t>(w.rows * w.cols));
  for (std::int64_t r = 0; r < w.rows; ++r)
    dequantize_weight_row(w, r,
                          std::span<float>(v).subspan(static_cast<std::size_t>(r * w.cols),
                                                      static_cast<std::size_t>(w.cols)));
  return v;
}

// x on the int8 grid: 2^-6 * q, with one |q| = 127 per block of 32 (so per block of 256 too).
OwnedTensor grid_input(std::mt19937& rng, std::int64_t n, std::int64_t k) {
  OwnedTensor x = random_tensor(rng, n, k);
  std::uniform_int_distribution<int> q(-127, 127);
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t c = 0; c < k; ++c)
      x.ref.row<float>(r)[c] =
          static_cast<float>(c % 32 == 5 ? (r % 2 ? -127 : 127) : q(rng)) / 64.0f;
  return x;
}

enum class Input { Grid, Arbitrary };

void check(Backend& backend, bool quantizes_inputs, DType t, std::int64_t n, std::int64_t m,
           std::int64_t k, Input input, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const OwnedWeight w = random_quant_weight(rng, t, m, k);
  const OwnedWeight bias = random_weight(rng, DType::F32, 1, m);
  const OwnedTensor x = input == Input::Grid ? grid_input(rng, n, k) : random_tensor(rng, n, k, 2);
  OwnedTensor out = random_tensor(rng, n, m, 3);
  backend.matmul(x.ref, w.ref, &bias.ref, out.ref);

  const std::vector<float> wf = dequantized(w.ref), xs = x.host(), got = out.host();
  const std::int64_t act_block = act_format(t) == ActFormat::Block256 ? 256 : 32;
  int bad = 0;
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t j = 0; j < m; ++j) {
      double want = load_f32(bias.ref.data, DType::F32, j), mag = 0, q_err = 0;
      for (std::int64_t b0 = 0; b0 < k; b0 += act_block) {
        double amax = 0;
        for (std::int64_t c = b0; c < b0 + act_block; ++c)
          amax = std::max(amax, std::fabs(double(xs[r * k + c])));
        for (std::int64_t c = b0; c < b0 + act_block; ++c) {
          const double p = double(xs[r * k + c]) * wf[j * k + c];
          want += p;
          mag += std::fabs(p);
          q_err += std::fabs(double(wf[j * k + c])) * amax / 127 / 2;
        }
      }
      const double tol =
          1e-5 * mag + 1e-6 + (quantizes_inputs && input == Input::Arbitrary ? q_err : 0.0);
      const double err = std::fabs(got[r * m + j] - want);
      if (err > tol && bad++ < 5)
        ADD_FAILURE() << dtype_name(t) << " n=" << n << " m=" << m << " k=" << k << " [" << r << ","
                      << j << "] got " << got[r * m + j] << " want " << want << " tol " << tol;
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_TRUE(padding_intact(out)) << "wrote outside the output view";
}

class QuantMatmul : public ::testing::TestWithParam<std::tuple<Isa, DType>> {};

TEST_P(QuantMatmul, FastMatchesOracle) {
  const auto [isa, t] = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported by this CPU";
  FastBackend fast(2, isa);
  const bool integer = find_quant_dot(isa, t) != nullptr;
  // The integer kernels exist for these types on AVX2 and AVX-512, none on Scalar.
  const bool listed = t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q5_0 ||
                      t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
  EXPECT_EQ(integer, listed && isa != Isa::Scalar);
  std::uint32_t seed = 1;
  // The last two: an odd number of blocks per row (the Q4_0 / Q5_0 kernels take blocks in pairs).
  const int odd_k = dtype_block_elems(t) == 256 ? 768 : 96;
  for (const auto& [n, m, k] : {std::tuple{1, 37, 512}, {3, 300, 256}, {9, 20, 1536},
                                {2, 33, odd_k}, {1, 5, int(dtype_block_elems(t))}}) {
    check(fast, integer, t, n, m, k, Input::Grid, seed++);
    check(fast, integer, t, n, m, k, Input::Arbitrary, seed++);
  }
}

// Each output element is computed by exactly one pool thread, whichever chunk of rows it
// claims: the result must not depend on the thread count (nor on which thread ran a row).
TEST_P(QuantMatmul, FastResultDoesNotDependOnThreadCount) {
  const auto [isa, t] = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported by this CPU";
  FastBackend one(1, isa), three(3, isa);
  std::mt19937 rng(11);
  const OwnedWeight w = random_quant_weight(rng, t, 301, 512);
  for (const std::int64_t n : {1, 3}) {
    const OwnedTensor x = random_tensor(rng, n, 512, 2);
    OwnedTensor out1 = random_tensor(rng, n, 301), out3 = copy_of(out1);
    one.matmul(x.ref, w.ref, nullptr, out1.ref);
    for (int round = 0; round < 3; ++round) {
      three.matmul(x.ref, w.ref, nullptr, out3.ref);
      const std::vector<float> a = out1.host(), b = out3.host();
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << dtype_name(t) << " n=" << n << " round " << round;
    }
  }
}

// The kernels take a run of weight rows (the fast backend passes a whole chunk): each row's
// result must be the one it gets alone, bit for bit, wherever it sits in the run (first, last,
// odd run lengths), and nothing past the run's outputs may be written.
TEST_P(QuantMatmul, KernelRowRunsMatchSingleRows) {
  const auto [isa, t] = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported by this CPU";
  const QuantDotFn dot = find_quant_dot(isa, t);
  if (dot == nullptr) GTEST_SKIP() << dtype_name(t) << ": no integer kernel on " << isa_name(isa);
  std::mt19937 rng(31);
  const std::int64_t k = dtype_block_elems(t) == 256 ? 768 : 96, rows = 13;
  const OwnedWeight w = random_quant_weight(rng, t, rows, k);
  const OwnedTensor x = random_tensor(rng, 1, k, 2);
  const ActFormat f = act_format(t);
  std::vector<std::uint8_t> act(act_row_bytes(f, k));
  quantize_act_row(isa, f, x.ref.row<float>(0), k, act.data());
  const std::size_t row_bytes = dtype_row_bytes(t, k);
  const std::int64_t n_blocks = k / dtype_block_elems(t);
  const auto* w0 = static_cast<const std::uint8_t*>(w.ref.data);
  std::vector<float> single(rows);
  for (std::int64_t m = 0; m < rows; ++m)
    dot(w0 + m * row_bytes, row_bytes, n_blocks, act.data(), 1, &single[m]);
  for (const auto& [first, count] :
       {std::pair<std::int64_t, std::int64_t>{0, rows}, {3, 7}, {12, 1}, {1, 2}}) {
    std::vector<float> got(static_cast<std::size_t>(count) + 1, -1.0f);
    dot(w0 + first * row_bytes, row_bytes, n_blocks, act.data(), count, got.data());
    EXPECT_EQ(std::memcmp(got.data(), &single[first], count * sizeof(float)), 0)
        << dtype_name(t) << " rows [" << first << ", " << first + count << ")";
    EXPECT_EQ(got[count], -1.0f) << "wrote past the run";
  }
}

// Each instruction set's activation quantization must give the scalar form's bytes (the integer kernels'
// results, and so the generated tokens, must not depend on which one ran): random rows, rows
// with exact rounding ties (x / d = k + 0.5), an all-zero block, and values that reach +-127.
class QuantizeActRow : public ::testing::TestWithParam<Isa> {};

TEST_P(QuantizeActRow, MatchesScalar) {
  const Isa isa = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported by this CPU";
  std::mt19937 rng(5);
  constexpr std::int64_t k = 768;
  std::vector<float> x(k);
  for (int round = 0; round < 4; ++round) {
    std::uniform_real_distribution<float> u(-3, 3);
    for (std::int64_t i = 0; i < k; ++i) x[i] = u(rng);
    if (round == 1)  // every block's max 127 (d = 1): x / d = x, halves are ties
      for (std::int64_t i = 0; i < k; ++i)
        x[i] = i % 32 == 0 ? 127.0f : static_cast<float>(static_cast<int>(rng() % 254) - 127) + 0.5f;
    if (round == 2) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
    if (round == 3) x[7] = -1e6f;
    for (const ActFormat f : {ActFormat::Block32, ActFormat::Pair32, ActFormat::Block256}) {
      // Pair32 with an odd block count too (the last pair's second block is zeros).
      for (const std::int64_t kk : {k, f == ActFormat::Pair32 ? k - 32 : k}) {
        const std::size_t bytes = act_row_bytes(f, kk);
        std::vector<std::uint8_t> scalar(bytes, 0xAB), simd(bytes, 0xCD);
        quantize_act_row(Isa::Scalar, f, x.data(), kk, scalar.data());
        quantize_act_row(isa, f, x.data(), kk, simd.data());
        EXPECT_EQ(std::memcmp(scalar.data(), simd.data(), bytes), 0)
            << "format " << int(f) << " k " << kk << " round " << round;
      }
    }
  }
}

bool same_bits(const OwnedTensor& a, const OwnedTensor& b) {
  const std::vector<float> x = a.host(), y = b.host();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// The fused forms of the fast backend (matmul_multi: one pool job over every target's rows;
// gated_mlp: gate, up, GLU and down's input quantization in one job, chunked on down's
// activation blocks) must give the unfused composition's bits: the same kernels on the same
// rows. (On Scalar, without integer kernels, both take the unfused path.) Down formats: 32-blocks, pairs with an odd last block (inter 96), 256-blocks.
class QuantFused : public ::testing::TestWithParam<Isa> {};

TEST_P(QuantFused, MatchesUnfusedComposition) {
  const Isa isa = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported by this CPU";
  struct Case {
    DType gate, down;
    std::int64_t k, inter;
  };
  const Case cases[] = {{DType::Q8_0, DType::Q8_0, 96, 160},
                        {DType::Q5_0, DType::Q4_K, 576, 512},
                        {DType::Q5_0, DType::Q5_0, 64, 96},
                        {DType::Q4_0, DType::Q6_K, 256, 256}};
  {
    FastBackend fast(3, isa);
    std::mt19937 rng(21);
    for (const Case& c : cases) {
      for (const std::int64_t n : {1, 3}) {
        const OwnedWeight gate = random_quant_weight(rng, c.gate, c.inter, c.k);
        const OwnedWeight up = random_quant_weight(rng, c.gate, c.inter, c.k);
        const OwnedWeight down = random_quant_weight(rng, c.down, 48, c.inter);
        const OwnedWeight bias = random_weight(rng, DType::F32, 1, c.inter);
        const OwnedTensor x = random_tensor(rng, n, c.k, 2);
        const std::string what = std::string(isa_name(isa)) + " " + std::string(dtype_name(c.gate)) + "/" +
                                 std::string(dtype_name(c.down)) + " n=" + std::to_string(n);

        GatedMlpWeights w;
        w.gate = gate.ref;
        w.up = up.ref;
        w.down = down.ref;
        OwnedTensor gate_up = random_tensor(rng, n, 2 * c.inter), act = random_tensor(rng, n, c.inter);
        OwnedTensor fused = random_tensor(rng, n, 48, 1);
        fast.gated_mlp(x.ref, w, GluActivation::Silu, gate_up.ref, act.ref, fused.ref);
        OwnedTensor g = random_tensor(rng, n, c.inter), u = random_tensor(rng, n, c.inter);
        OwnedTensor a = random_tensor(rng, n, c.inter), unfused = copy_of(fused);
        fast.matmul(x.ref, gate.ref, nullptr, g.ref);
        fast.matmul(x.ref, up.ref, nullptr, u.ref);
        fast.glu(g.ref, u.ref, GluActivation::Silu, a.ref);
        fast.matmul(a.ref, down.ref, nullptr, unfused.ref);
        EXPECT_TRUE(same_bits(fused, unfused)) << "gated_mlp " << what;
        EXPECT_TRUE(padding_intact(fused)) << "gated_mlp wrote outside the output view";

        OwnedTensor multi_g = random_tensor(rng, n, c.inter), multi_u = random_tensor(rng, n, c.inter, 1);
        const MatmulTarget targets[] = {{&gate.ref, &bias.ref, multi_g.ref}, {&up.ref, nullptr, multi_u.ref}};
        fast.matmul_multi(x.ref, targets);
        fast.matmul(x.ref, gate.ref, &bias.ref, g.ref);
        EXPECT_TRUE(same_bits(multi_g, g)) << "matmul_multi (bias) " << what;
        EXPECT_TRUE(same_bits(multi_u, u)) << "matmul_multi " << what;
      }
    }
  }
}

const auto isa_param_name = [](const auto& info) { return std::string(isa_name(info.param)); };
INSTANTIATE_TEST_SUITE_P(Isa, QuantizeActRow, ::testing::ValuesIn(all_isas()), isa_param_name);
INSTANTIATE_TEST_SUITE_P(Isa, QuantFused, ::testing::ValuesIn(all_isas()), isa_param_name);

TEST_P(QuantMatmul, ReferenceMatchesOracle) {
  const DType t = std::get<1>(GetParam());  // the reference has no instruction sets
  ReferenceBackend ref;
  check(ref, false, t, 2, 19, 512, Input::Arbitrary, 7);
}

INSTANTIATE_TEST_SUITE_P(IsaDtype, QuantMatmul,
                         ::testing::Combine(::testing::ValuesIn(all_isas()),
                                            ::testing::ValuesIn(kTypes)),
                         [](const auto& info) {
                           return std::string(isa_name(std::get<0>(info.param))) + "_" +
                                  std::string(dtype_name(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace akv::test
