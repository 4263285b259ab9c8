// Quantized-weight matmul of the CPU backends against the scalar dequantization oracle, every
// GGUF block type on every instruction set: the reference backend, the fast backend's integer
// kernels (Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K on AVX2 / AVX-512 VNNI), its kernels of the
// Q5_0 / Q8_0 / Q4_K weights it repacks at upload (quant_repack.h), and its dequantized-row
// fallback (the other types, and every type on Scalar). The expected value is sum_k x_k *
// dequantize(w)_k in double, w the GGUF blocks.
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
#include "backend/cpu/quant_repack.h"
#include "backend/cpu/reference_backend.h"
#include "parity_util.h"
#include "tensor/dequantize.h"
#include "tensor/quant_blocks.h"
#include "tensor/safetensors.h"

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

// w handed to backend.upload_weight as a checkpoint tensor (the fast backend repacks Q5_0 / Q8_0 /
// Q4_K).
WeightRef uploaded(Backend& backend, const OwnedWeight& w) {
  TensorInfo t;
  t.name = "w";
  t.dtype = w.ref.dtype;
  t.shape = {w.ref.rows, w.ref.cols};
  t.bytes = w.bytes;
  return backend.upload_weight(t);
}

enum class Input { Grid, Arbitrary };
// How the backend gets the weight: the GGUF bytes as they are, or through upload_weight.
enum class Weight { AsIs, Uploaded };

void check(Backend& backend, bool quantizes_inputs, DType t, std::int64_t n, std::int64_t m,
           std::int64_t k, Input input, std::uint32_t seed, Weight how = Weight::AsIs) {
  std::mt19937 rng(seed);
  const OwnedWeight w = random_quant_weight(rng, t, m, k);
  const OwnedWeight bias = random_weight(rng, DType::F32, 1, m);
  const OwnedTensor x = input == Input::Grid ? grid_input(rng, n, k) : random_tensor(rng, n, k, 2);
  OwnedTensor out = random_tensor(rng, n, m, 3);
  const WeightRef used = how == Weight::Uploaded ? uploaded(backend, w) : w.ref;
  if (how == Weight::Uploaded) {
    EXPECT_NE(used.data, w.ref.data) << "upload_weight did not repack";
  }
  backend.matmul(x.ref, used, &bias.ref, out.ref);

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
// Weights as they are and through upload_weight (repacked Q5_0 / Q8_0 / Q4_K).
TEST_P(QuantMatmul, FastResultDoesNotDependOnThreadCount) {
  const auto [isa, t] = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported by this CPU";
  FastBackend one(1, isa), three(3, isa);
  std::mt19937 rng(11);
  const OwnedWeight w = random_quant_weight(rng, t, 301, 512);
  const WeightRef w1 = uploaded(one, w), w3 = uploaded(three, w);
  for (const auto& [n, repacked] : {std::pair{1, false}, {3, false}, {1, true}, {3, true}}) {
    const OwnedTensor x = random_tensor(rng, n, 512, 2);
    OwnedTensor out1 = random_tensor(rng, n, 301), out3 = copy_of(out1);
    one.matmul(x.ref, repacked ? w1 : w.ref, nullptr, out1.ref);
    for (int round = 0; round < 3; ++round) {
      three.matmul(x.ref, repacked ? w3 : w.ref, nullptr, out3.ref);
      const std::vector<float> a = out1.host(), b = out3.host();
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << dtype_name(t) << " n=" << n << (repacked ? " repacked" : "") << " round " << round;
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
// rows. (On Scalar, without integer kernels, both take the unfused path.) Down formats: 32-blocks,
// pairs with an odd last block (inter 96), 256-blocks. The weights as they are and through
// upload_weight (Q5_0 / Q8_0 / Q4_K repacked).
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
      for (const auto& [n, how] : {std::pair{1, Weight::AsIs},
                                   {3, Weight::AsIs},
                                   {1, Weight::Uploaded},
                                   {3, Weight::Uploaded}}) {
        const OwnedWeight gate_bytes = random_quant_weight(rng, c.gate, c.inter, c.k);
        const OwnedWeight up_bytes = random_quant_weight(rng, c.gate, c.inter, c.k);
        const OwnedWeight down_bytes = random_quant_weight(rng, c.down, 48, c.inter);
        // The weights as the backend holds them: GGUF bytes, or repacked by upload_weight.
        const bool upload = how == Weight::Uploaded;
        const auto held = [&](const OwnedWeight& b) { return upload ? uploaded(fast, b) : b.ref; };
        const WeightRef gate = held(gate_bytes), up = held(up_bytes), down = held(down_bytes);
        const OwnedWeight bias = random_weight(rng, DType::F32, 1, c.inter);
        const OwnedTensor x = random_tensor(rng, n, c.k, 2);
        const std::string what = std::string(isa_name(isa)) + " " +
                                 std::string(dtype_name(c.gate)) + "/" +
                                 std::string(dtype_name(c.down)) + " n=" + std::to_string(n) +
                                 (how == Weight::Uploaded ? " uploaded" : "");

        GatedMlpWeights w;
        w.gate = gate;
        w.up = up;
        w.down = down;
        OwnedTensor gate_up = random_tensor(rng, n, 2 * c.inter),
                    act = random_tensor(rng, n, c.inter);
        OwnedTensor fused = random_tensor(rng, n, 48, 1);
        fast.gated_mlp(x.ref, w, GluActivation::Silu, gate_up.ref, act.ref, fused.ref);
        OwnedTensor g = random_tensor(rng, n, c.inter), u = random_tensor(rng, n, c.inter);
        OwnedTensor a = random_tensor(rng, n, c.inter), unfused = copy_of(fused);
        fast.matmul(x.ref, gate, nullptr, g.ref);
        fast.matmul(x.ref, up, nullptr, u.ref);
        fast.glu(g.ref, u.ref, GluActivation::Silu, a.ref);
        fast.matmul(a.ref, down, nullptr, unfused.ref);
        EXPECT_TRUE(same_bits(fused, unfused)) << "gated_mlp " << what;
        EXPECT_TRUE(padding_intact(fused)) << "gated_mlp wrote outside the output view";

        OwnedTensor multi_g = random_tensor(rng, n, c.inter),
                    multi_u = random_tensor(rng, n, c.inter, 1);
        const MatmulTarget targets[] = {{&gate, &bias.ref, multi_g.ref},
                                        {&up, nullptr, multi_u.ref}};
        fast.matmul_multi(x.ref, targets);
        fast.matmul(x.ref, gate, &bias.ref, g.ref);
        EXPECT_TRUE(same_bits(multi_g, g)) << "matmul_multi (bias) " << what;
        EXPECT_TRUE(same_bits(multi_u, u)) << "matmul_multi " << what;
      }
    }
  }
}

const auto isa_param_name = [](const auto& info) { return std::string(isa_name(info.param)); };
INSTANTIATE_TEST_SUITE_P(Isa, QuantizeActRow, ::testing::ValuesIn(all_isas()), isa_param_name);
INSTANTIATE_TEST_SUITE_P(Isa, QuantFused, ::testing::ValuesIn(all_isas()), isa_param_name);

// upload_weight repacks Q5_0, Q8_0 and Q4_K matrices (of at least 8 rows) on the instruction
// sets that have their kernels, and matmul through them matches the oracle on the GGUF bytes:
// whole groups, a padded last group, a single group, an odd block count, prefill tiles (n = 9),
// and the 135M model's 576 x 576 (Q4_K: its down_proj, 576 x 1536).
TEST_P(QuantMatmul, FastRepackedMatchesOracle) {
  const auto [isa, t] = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported by this CPU";
  const bool kernel = find_repacked_dot(isa, t) != nullptr;
  EXPECT_EQ(kernel, repackable(t) && isa != Isa::Scalar);
  if (!kernel) GTEST_SKIP() << dtype_name(t) << ": no repacked form on " << isa_name(isa);
  FastBackend fast(2, isa);
  std::uint32_t seed = 101;
  const bool k256 = dtype_block_elems(t) == 256;
  for (const auto& [n, m, k] : {std::tuple{1, 37, 512},
                                {3, 300, 256},
                                {9, 20, 1536},
                                {2, 33, k256 ? 768 : 96},
                                {1, 8, k256 ? 256 : 32},
                                {1, 576, k256 ? 1536 : 576}}) {
    check(fast, true, t, n, m, k, Input::Grid, seed++, Weight::Uploaded);
    check(fast, true, t, n, m, k, Input::Arbitrary, seed++, Weight::Uploaded);
  }
}

// The layout: each row unpacked from the repacked form is its GGUF bytes, the padding rows
// unpack to zero blocks, and groups repacked in separate calls (as the pool splits them) give
// the bytes of one call. The same on every instruction set (the layout does not depend on it).
TEST_P(QuantMatmul, RepackedLayoutRoundTrips) {
  const DType t = std::get<1>(GetParam());
  if (!repackable(t)) GTEST_SKIP() << dtype_name(t) << " has no repacked form";
  std::mt19937 rng(41);
  const std::int64_t rows = 21, cols = 3 * dtype_block_elems(t);  // 3 groups, 3 padding rows
  const OwnedWeight w = random_quant_weight(rng, t, rows, cols);
  const std::size_t row_bytes = dtype_row_bytes(t, cols);
  ASSERT_EQ(repacked_bytes(t, rows, cols), 24 * row_bytes);
  std::vector<std::uint8_t> whole(24 * row_bytes, 0xAB), split(24 * row_bytes, 0xCD);
  repack_groups(t, w.bytes.data(), rows, cols, 0, 3, whole.data());
  repack_groups(t, w.bytes.data(), rows, cols, 2, 3, split.data());
  repack_groups(t, w.bytes.data(), rows, cols, 0, 2, split.data());
  EXPECT_EQ(whole, split);
  EXPECT_NE(std::memcmp(whole.data(), w.bytes.data(), 8 * row_bytes), 0) << "not repacked";
  std::vector<std::uint8_t> row(row_bytes), zeros(row_bytes, 0);
  for (std::int64_t r = 0; r < 24; ++r) {
    unpack_row(t, whole.data(), cols, r, row.data());
    if (r < rows)
      EXPECT_EQ(std::memcmp(row.data(), w.bytes.data() + r * row_bytes, row_bytes), 0)
          << "row " << r;
    else
      EXPECT_EQ(row, zeros) << "padding row " << r;
  }
}

// dot_repacked_rows over ranges that cut groups (the pool's chunks, expert views) gives each
// row the bits it gets in a whole-group run, writes nothing past the range, and the padding
// rows of the last group come out 0.
TEST_P(QuantMatmul, RepackedRowRangesMatchWholeGroups) {
  const auto [isa, t] = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported by this CPU";
  const RepackedDotFn dot = find_repacked_dot(isa, t);
  if (dot == nullptr) GTEST_SKIP() << dtype_name(t) << ": no repacked form on " << isa_name(isa);
  std::mt19937 rng(43);
  const std::int64_t rows = 29, n_blocks = 3, cols = n_blocks * dtype_block_elems(t);
  const ActFormat format = repacked_act_format(t);
  const OwnedWeight w = random_quant_weight(rng, t, rows, cols);
  const std::size_t row_bytes = dtype_row_bytes(t, cols);
  std::vector<std::uint8_t> packed(repacked_bytes(t, rows, cols));
  repack_groups(t, w.bytes.data(), rows, cols, 0, 4, packed.data());
  const OwnedTensor x = random_tensor(rng, 1, cols, 2);
  std::vector<std::uint8_t> act(act_row_bytes(format, cols));
  quantize_act_row(isa, format, x.ref.row<float>(0), cols, act.data());
  std::vector<float> all(32, -1.0f);
  dot(packed.data(), n_blocks, act.data(), 4, all.data());
  for (std::int64_t r = rows; r < 32; ++r) EXPECT_EQ(all[r], 0.0f) << "padding row " << r;
  for (const auto& [first, count] : {std::pair<std::int64_t, std::int64_t>{0, rows},
                                     {3, 7},
                                     {8, 16},
                                     {12, 1},
                                     {5, 20},
                                     {28, 1}}) {
    std::vector<float> got(static_cast<std::size_t>(count) + 1, -1.0f);
    dot_repacked_rows(dot, packed.data(), row_bytes, n_blocks, act.data(), first, first + count,
                      got.data());
    EXPECT_EQ(std::memcmp(got.data(), &all[first], count * sizeof(float)), 0)
        << dtype_name(t) << " rows [" << first << ", " << first + count << ")";
    EXPECT_EQ(got[count], -1.0f) << "wrote past the range";
  }
}

// Views of rows of a repacked matrix (moe_fast.cpp's expert slices, here 12 rows: every other
// one starts mid-group) multiply as those rows of the whole matrix, bit for bit.
TEST_P(QuantMatmul, RepackedRowViewsMatchWholeMatrix) {
  const auto [isa, t] = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported by this CPU";
  if (find_repacked_dot(isa, t) == nullptr)
    GTEST_SKIP() << dtype_name(t) << ": no repacked form on " << isa_name(isa);
  FastBackend fast(2, isa);
  std::mt19937 rng(47);
  const std::int64_t experts = 3, rows = 12, cols = 3 * dtype_block_elems(t);
  const OwnedWeight w = random_quant_weight(rng, t, experts * rows, cols);
  const WeightRef whole = uploaded(fast, w);
  ASSERT_NE(whole.data, w.ref.data) << "upload_weight did not repack";
  for (const std::int64_t n : {1, 3}) {
    const OwnedTensor x = random_tensor(rng, n, cols);
    OwnedTensor all = random_tensor(rng, n, experts * rows);
    fast.matmul(x.ref, whole, nullptr, all.ref);
    for (std::int64_t e = 0; e < experts; ++e) {
      const WeightRef view{
          static_cast<const std::uint8_t*>(whole.data) + e * rows * dtype_row_bytes(t, cols), t,
          rows, cols};
      OwnedTensor part = random_tensor(rng, n, rows);
      fast.matmul(x.ref, view, nullptr, part.ref);
      for (std::int64_t r = 0; r < n; ++r)
        EXPECT_EQ(std::memcmp(part.ref.row<float>(r), all.ref.row<float>(r) + e * rows,
                              rows * sizeof(float)),
                  0)
            << dtype_name(t) << " expert " << e << " input " << r;
    }
  }
}

// A repacked table (tied embeddings: the same weight is lm_head) looks rows up as the
// reference does on the GGUF bytes.
TEST_P(QuantMatmul, RepackedEmbedMatchesReference) {
  const auto [isa, t] = GetParam();
  if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported by this CPU";
  if (find_repacked_dot(isa, t) == nullptr)
    GTEST_SKIP() << dtype_name(t) << ": no repacked form on " << isa_name(isa);
  FastBackend fast(2, isa);
  ReferenceBackend ref;
  std::mt19937 rng(53);
  const std::int64_t cols = 3 * dtype_block_elems(t);
  const OwnedWeight w = random_quant_weight(rng, t, 43, cols);
  const WeightRef table = uploaded(fast, w);
  ASSERT_NE(table.data, w.ref.data) << "upload_weight did not repack";
  const std::int32_t ids[] = {0, 42, 17, 8, 7, 40};
  OwnedTensor got = random_tensor(rng, 6, cols, 1), want = random_tensor(rng, 6, cols);
  fast.embed(table, ids, 0.5f, got.ref);
  ref.embed(w.ref, ids, 0.5f, want.ref);
  EXPECT_TRUE(same_bits(got, want));
  EXPECT_TRUE(padding_intact(got)) << "embed wrote outside the output view";
}

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
