// The MoE op's building blocks and backends: MXFP4 decoding against a hand-computed table, the
// two gating rules against hand-computed weights, the reference op against a direct per-expert
// computation, MXFP4 experts against the same experts decoded to float, and the fast backend
// against the reference (float and MXFP4, bf16, decode and prefill row counts); GGUF-block
// experts (Q8_0, Q5_0, Q4_K, Q5_K, Q6_K, gate/up and down of different types) against the same
// experts dequantized to f32, on the reference and the fast backend.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <vector>

#include "backend/cpu/fast_backend.h"
#include "backend/cpu/host_buffer.h"
#include "backend/moe.h"
#include "parity_util.h"
#include "tensor/dequantize.h"

namespace akv {
namespace {

TEST(Mxfp4, DecodesE2M1NibblesAndE8M0ScalesByHand) {
  // E2M1: sign bit 3, exponent bits 2-1 (bias 1), mantissa bit 0; 0b0001 is the subnormal 0.5.
  const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(mxfp4_e2m1_value(static_cast<std::uint8_t>(i)), want[i]) << i;
  EXPECT_TRUE(std::signbit(mxfp4_e2m1_value(8)));
  EXPECT_EQ(mxfp4_scale_value(127), 1.0f);
  EXPECT_EQ(mxfp4_scale_value(128), 2.0f);
  EXPECT_EQ(mxfp4_scale_value(125), 0.25f);
  EXPECT_EQ(mxfp4_scale_value(0), std::ldexp(1.0f, -127));
  EXPECT_TRUE(std::isnan(mxfp4_scale_value(255)));

  // Two blocks of 32: low nibble is the even element. Block 0 scale 2^1, block 1 scale 2^-2.
  std::uint8_t blocks[32] = {};
  blocks[0] = 0x71;   // elements 0, 1: 0.5, 6        -> x2: 1, 12
  blocks[1] = 0x9f;   // elements 2, 3: -6, -0.5      -> x2: -12, -1
  blocks[15] = 0x2c;  // elements 30, 31: -2, 1       -> x2: -4, 2
  blocks[16] = 0x35;  // elements 32, 33: 3, 1.5     -> x0.25: 0.75, 0.375
  const std::uint8_t scales[2] = {128, 125};
  float out[64];
  decode_mxfp4_row(blocks, scales, 64, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 12.0f);
  EXPECT_EQ(out[2], -12.0f);
  EXPECT_EQ(out[3], -1.0f);
  EXPECT_EQ(out[4], 0.0f);
  EXPECT_EQ(out[30], -4.0f);
  EXPECT_EQ(out[31], 2.0f);
  EXPECT_EQ(out[32], 0.75f);
  EXPECT_EQ(out[33], 0.375f);
  EXPECT_EQ(out[63], 0.0f);
}

// The released layout repacked into GGUF blocks: every nibble pair at every position and every
// finite scale decode to the same values through GGUF's dequantizer (the CUDA kernels of both
// layouts are compared through this repack), and the nibbles land where GGUF puts them.
TEST(Mxfp4, GgufBlocksOfTheReleasedLayoutDequantizeToTheSameValues) {
  // Scales 0..254 (255 is NaN in one, 2^127 in the other), each over 16 blocks.
  const std::int64_t n = 32 * 16 * 255;
  std::vector<std::uint8_t> blocks(n / 2), scales(n / 32), gguf(n / 32 * 17);
  for (std::int64_t b = 0; b < n / 32; ++b) {
    scales[b] = static_cast<std::uint8_t>(b % 255);
    for (int k = 0; k < 16; ++k)  // byte values 0..255 across a block's 16 bytes over 16 blocks
      blocks[b * 16 + k] = static_cast<std::uint8_t>(16 * (b % 16) + k);
  }
  mxfp4_row_to_gguf_blocks(blocks.data(), scales.data(), n, gguf.data());
  std::vector<float> want(n), got(n);
  decode_mxfp4_row(blocks.data(), scales.data(), n, want.data());
  dequantize(GgmlType::MXFP4, gguf, got);
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want[i]) << "value " << i;
  // Block 0: value 2k is byte k's low nibble; in GGUF value j < 16 is byte j's low nibble and
  // j + 16 its high one.
  const std::uint8_t split[16] = {0x21, 0x43, 0x65, 0x87, 0xa9, 0xcb, 0xed, 0x0f,
                                  0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe};
  const std::uint8_t scale = 127;
  std::uint8_t block[17];
  mxfp4_row_to_gguf_blocks(split, &scale, 32, block);
  EXPECT_EQ(block[0], 127);
  EXPECT_EQ(block[1], 0x01);   // values 0 (1) and 16 (0)
  EXPECT_EQ(block[2], 0x12);   // values 1 (split[0] high: 2) and 17 (split[8] high: 1)
  EXPECT_EQ(block[16], 0xf0);  // values 15 (split[7] high: 0) and 31 (split[15] high: f)
}

TEST(MoeRouting, SoftmaxThenTopKAndTopKThenSoftmax) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.0f};
  std::int32_t ids[2];
  float w[2];
  MoeParams p{.n_experts = 4, .top_k = 2, .inter = 1, .gating = MoeGating::SoftmaxTopK};
  route_experts(logits, p, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 3);
  const double z = std::exp(0.5) + std::exp(2.0) + std::exp(-1.0) + std::exp(1.0);
  EXPECT_NEAR(w[0], std::exp(2.0) / z, 1e-7);
  EXPECT_NEAR(w[1], std::exp(1.0) / z, 1e-7);
  p.norm_topk_prob = true;
  route_experts(logits, p, ids, w);
  EXPECT_NEAR(w[0], std::exp(2.0) / (std::exp(2.0) + std::exp(1.0)), 1e-7);
  EXPECT_NEAR(w[0] + w[1], 1.0, 1e-7);
  p.norm_topk_prob = false;
  p.gating = MoeGating::TopKSoftmax;  // same as renormalised softmax: exp(2) / (exp(2) + exp(1))
  route_experts(logits, p, ids, w);
  EXPECT_NEAR(w[1], 1.0 / (1.0 + std::exp(1.0)), 1e-7);
  // Ties go to the lower id.
  const std::vector<float> tied = {1.0f, 3.0f, 3.0f, 3.0f};
  route_experts(tied, p, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
}

TEST(MoeActivation, ClampedSwigluClampsGateAboveAndUpBothWays) {
  const MoeParams p{
      .act = ExpertActivation::ClampedSwiglu, .swiglu_limit = 7.0f, .swiglu_alpha = 1.702f};
  auto want = [](double g, double u) { return (u + 1) * g / (1 + std::exp(-1.702 * g)); };
  EXPECT_NEAR(expert_activation(1.5f, -0.5f, p), want(1.5, -0.5), 1e-6);
  EXPECT_NEAR(expert_activation(9.0f, 8.0f, p), want(7.0, 7.0), 1e-5);
  EXPECT_NEAR(expert_activation(-9.0f, -8.0f, p), want(-9.0, -7.0),
              1e-6);  // no lower clamp on gate
  const MoeParams silu{.act = ExpertActivation::Silu};
  EXPECT_NEAR(expert_activation(1.5f, -0.5f, silu), 1.5 / (1 + std::exp(-1.5)) * -0.5, 1e-6);
}

// A random MoE layer: experts in float (F32/BF16) or MXFP4 with the float copy of its decoding.
struct Experts {
  test::OwnedWeight gate_up, down, gate_up_bias, down_bias;
  std::vector<std::uint8_t> gu_blocks, gu_scales, dn_blocks, dn_scales;
  MoeWeights w;
};

std::vector<std::uint8_t> random_bytes(std::mt19937& rng, std::size_t n, int lo, int hi) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<std::uint8_t> b(n);
  for (auto& v : b) v = static_cast<std::uint8_t>(d(rng));
  return b;
}

// MXFP4 [rows, cols] with its f32 decoding in `decoded`.
void random_mxfp4(std::mt19937& rng, std::int64_t rows, std::int64_t cols,
                  std::vector<std::uint8_t>& blocks, std::vector<std::uint8_t>& scales,
                  test::OwnedWeight& decoded) {
  blocks = random_bytes(rng, static_cast<std::size_t>(rows * cols / 2), 0, 255);
  scales = random_bytes(rng, static_cast<std::size_t>(rows * cols / 32), 120, 128);
  decoded.bytes.resize(static_cast<std::size_t>(rows * cols) * sizeof(float));
  auto* f = reinterpret_cast<float*>(decoded.bytes.data());
  for (std::int64_t r = 0; r < rows; ++r)
    decode_mxfp4_row(blocks.data() + r * cols / 2, scales.data() + r * cols / 32, cols,
                     f + r * cols);
  decoded.ref = {decoded.bytes.data(), DType::F32, rows, cols};
}

struct Case {
  DType dtype;
  bool mxfp4;
  MoeParams p;
  std::int64_t hidden, n;
};

Experts make_experts(std::mt19937& rng, const Case& c) {
  const MoeParams& p = c.p;
  Experts e;
  if (c.mxfp4) {
    random_mxfp4(rng, p.n_experts * 2 * p.inter, c.hidden, e.gu_blocks, e.gu_scales, e.gate_up);
    random_mxfp4(rng, p.n_experts * c.hidden, p.inter, e.dn_blocks, e.dn_scales, e.down);
  } else {
    e.gate_up = test::random_weight(rng, c.dtype, p.n_experts * 2 * p.inter, c.hidden, 0.3f);
    e.down = test::random_weight(rng, c.dtype, p.n_experts * c.hidden, p.inter, 0.3f);
  }
  e.gate_up_bias = test::random_weight(rng, DType::F32, p.n_experts, 2 * p.inter);
  e.down_bias = test::random_weight(rng, DType::F32, p.n_experts, c.hidden);
  e.w = {.gate_up = e.gate_up.ref,
         .down = e.down.ref,
         .gate_up_bias = e.gate_up_bias.ref,
         .down_bias = e.down_bias.ref};
  return e;
}

MoeWeights as_mxfp4(const Experts& e) {
  MoeWeights w = e.w;
  w.format = ExpertFormat::Mxfp4;
  w.gate_up = {e.gu_blocks.data(), DType::U8, e.w.gate_up.rows, e.w.gate_up.cols};
  w.gate_up_scales = {e.gu_scales.data(), DType::U8, e.w.gate_up.rows, e.w.gate_up.cols / 32};
  w.down = {e.dn_blocks.data(), DType::U8, e.w.down.rows, e.w.down.cols};
  w.down_scales = {e.dn_scales.data(), DType::U8, e.w.down.rows, e.w.down.cols / 32};
  return w;
}

struct Scratch {
  std::unique_ptr<HostBuffer> route, gate_up, act, down;
  MoeScratch s;
  Scratch(const Case& c) {
    const std::int64_t k = c.p.top_k, n = c.n;
    route = std::make_unique<HostBuffer>(DType::F32, n, 2 * k);
    gate_up = std::make_unique<HostBuffer>(DType::F32, n * k, 2 * c.p.inter);
    act = std::make_unique<HostBuffer>(DType::F32, n * k, c.p.inter);
    down = std::make_unique<HostBuffer>(DType::F32, n * k, c.hidden);
    s = {route->tensor(), gate_up->tensor(), act->tensor(), down->tensor()};
  }
};

std::vector<float> run(Backend& b, const Case& c, const MoeWeights& w, TensorRef x,
                       TensorRef logits) {
  Scratch s(c);
  HostBuffer out(DType::F32, c.n, c.hidden);
  b.moe(x, logits, w, c.p, s.s, out.tensor());
  std::vector<float> h(static_cast<std::size_t>(c.n * c.hidden));
  b.download(out.tensor(), h);
  return h;
}

// The op written out for one token from its definition, with the float weights.
std::vector<double> direct(const Case& c, const Experts& e, const float* x, const float* logits) {
  const MoeParams& p = c.p;
  std::vector<std::int32_t> ids(p.top_k);
  std::vector<float> wt(p.top_k);
  route_experts({logits, static_cast<std::size_t>(p.n_experts)}, p, ids, wt);
  std::vector<double> y(c.hidden, 0.0);
  auto at = [](const WeightRef& m, std::int64_t r, std::int64_t col) {
    return load_f32(m.data, m.dtype, r * m.cols + col);
  };
  for (std::int64_t i = 0; i < p.top_k; ++i) {
    const std::int64_t ex = ids[i];
    std::vector<float> act(p.inter);
    for (std::int64_t j = 0; j < p.inter; ++j) {
      const std::int64_t rg = p.interleaved_gate_up ? 2 * j : j,
                         ru = p.interleaved_gate_up ? 2 * j + 1 : p.inter + j;
      double g = at(e.gate_up_bias.ref, ex, rg), u = at(e.gate_up_bias.ref, ex, ru);
      for (std::int64_t k = 0; k < c.hidden; ++k) {
        g += double(x[k]) * at(e.gate_up.ref, ex * 2 * p.inter + rg, k);
        u += double(x[k]) * at(e.gate_up.ref, ex * 2 * p.inter + ru, k);
      }
      act[j] = expert_activation(float(g), float(u), p);
    }
    for (std::int64_t r = 0; r < c.hidden; ++r) {
      double d = at(e.down_bias.ref, ex, r);
      for (std::int64_t j = 0; j < p.inter; ++j)
        d += double(act[j]) * at(e.down.ref, ex * c.hidden + r, j);
      y[r] += wt[i] * d;
    }
  }
  return y;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double max_ref = 0, max_err = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    max_ref = std::max(max_ref, std::fabs(double(want[i])));
    max_err = std::max(max_err, std::fabs(double(got[i]) - want[i]));
  }
  EXPECT_GT(max_ref, 0.0) << what;
  EXPECT_LE(max_err, tol * (max_ref + 1.0)) << what << ": max abs error " << max_err;
}

const MoeParams kQwen{.n_experts = 8,
                      .top_k = 3,
                      .inter = 32,
                      .gating = MoeGating::SoftmaxTopK,
                      .norm_topk_prob = true};
const MoeParams kGptOss{.n_experts = 6,
                        .top_k = 2,
                        .inter = 64,
                        .gating = MoeGating::TopKSoftmax,
                        .act = ExpertActivation::ClampedSwiglu,
                        .swiglu_limit = 7.0f,
                        .swiglu_alpha = 1.702f,
                        .interleaved_gate_up = true};

class MoeOp : public ::testing::TestWithParam<Case> {};

TEST_P(MoeOp, ReferenceMatchesDefinitionAndFastMatchesReference) {
  const Case c = GetParam();
  std::mt19937 rng(42);
  const Experts e = make_experts(rng, c);
  const test::OwnedTensor x = test::random_tensor(rng, c.n, c.hidden, /*pad=*/3, 2.0f);
  const test::OwnedTensor logits = test::random_tensor(rng, c.n, c.p.n_experts, 0, 3.0f);
  const MoeWeights w = c.mxfp4 ? as_mxfp4(e) : e.w;
  ReferenceBackend ref;
  const std::vector<float> got_ref = run(ref, c, w, x.ref, logits.ref);
  std::vector<float> want;
  for (std::int64_t t = 0; t < c.n; ++t)
    for (double v : direct(c, e, x.ref.row<const float>(t), logits.ref.row<const float>(t)))
      want.push_back(static_cast<float>(v));
  expect_close(got_ref, want, 1e-5, "reference vs definition");
  if (c.mxfp4)
    expect_close(run(ref, c, e.w, x.ref, logits.ref), got_ref, 1e-6, "MXFP4 vs its float decoding");
  for (Isa isa : test::all_isas()) {
    if (!isa_supported(isa)) continue;
    FastBackend fast(2, isa, 0);
    expect_close(run(fast, c, w, x.ref, logits.ref), got_ref, 1e-4, isa_name(isa));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, MoeOp,
                         ::testing::Values(Case{DType::F32, false, kQwen, 64, 1},
                                           Case{DType::F32, false, kQwen, 64, 19},
                                           Case{DType::BF16, false, kQwen, 64, 5},
                                           Case{DType::F32, false, kGptOss, 64, 1},
                                           Case{DType::F32, false, kGptOss, 64, 23},
                                           Case{DType::F32, true, kGptOss, 64, 1},
                                           Case{DType::F32, true, kGptOss, 96, 17},
                                           Case{DType::F32, true, kGptOss, 64, 48}));

// Random GGUF blocks of `t` [rows, cols]: random codes, the f16 scale fields set to moderate
// values (random bits would give inf and NaN) so every type's values are of order 0.1.
test::OwnedWeight random_blocks(std::mt19937& rng, DType t, std::int64_t rows, std::int64_t cols) {
  test::OwnedWeight w;
  w.bytes = random_bytes(rng, dtype_row_bytes(t, cols) * static_cast<std::size_t>(rows), 0, 255);
  std::uniform_real_distribution<float> scale(0.002f, 0.02f);
  const auto put_f16 = [](std::uint8_t* p, float v) {
    const std::uint16_t h = f32_to_f16(v);
    std::memcpy(p, &h, 2);
  };
  const auto block_bytes = static_cast<std::size_t>(dtype_block_bytes(t));
  for (std::size_t off = 0; off < w.bytes.size(); off += block_bytes) {
    std::uint8_t* b = w.bytes.data() + off;
    switch (t) {
      case DType::Q8_0: put_f16(b, scale(rng) / 8); break;
      case DType::Q5_0: put_f16(b, scale(rng)); break;
      case DType::Q4_K:
      case DType::Q5_K:
        put_f16(b, scale(rng) / 8);
        put_f16(b + 2, scale(rng) / 8);
        break;
      case DType::Q6_K: put_f16(b + 208, scale(rng) / 64); break;
      default: ADD_FAILURE() << "no random blocks for " << dtype_name(t);
    }
  }
  w.ref = {w.bytes.data(), t, rows, cols};
  return w;
}

// `w` dequantized to an F32 weight of its shape (the oracle's values).
test::OwnedWeight dequantized(const WeightRef& w) {
  test::OwnedWeight f;
  f.bytes.resize(static_cast<std::size_t>(w.rows * w.cols) * sizeof(float));
  auto* out = reinterpret_cast<float*>(f.bytes.data());
  for (std::int64_t r = 0; r < w.rows; ++r)
    expert_matrix_row(ExpertFormat::GgufBlocks, w, {}, r, out + r * w.cols);
  f.ref = {f.bytes.data(), DType::F32, w.rows, w.cols};
  return f;
}

struct GgufCase {
  DType gate_up, down;
  MoeParams p;
  std::int64_t hidden, n;
};
void PrintTo(const GgufCase& c, std::ostream* os) {
  *os << dtype_name(c.gate_up) << "_" << dtype_name(c.down) << "_k" << c.p.top_k << "_n" << c.n;
}

class MoeGgufOp : public ::testing::TestWithParam<GgufCase> {};

// The reference on GGUF blocks equals the reference on their dequantized values (it decodes the
// same rows); the fast backend matches it within f32 rounding where it dequantizes rows (Scalar)
// and within the int8 rounding of its inputs where it runs the integer kernels (AVX2, AVX-512:
// blocks of 256 for the k-quants; a wrong expert or row errs by the size of the outputs).
TEST_P(MoeGgufOp, BlocksMatchTheirDequantizedValues) {
  const GgufCase g = GetParam();
  const Case c{DType::F32, false, g.p, g.hidden, g.n};
  std::mt19937 rng(7);
  const test::OwnedWeight gu = random_blocks(rng, g.gate_up, g.p.n_experts * 2 * g.p.inter, g.hidden);
  const test::OwnedWeight dn = random_blocks(rng, g.down, g.p.n_experts * g.hidden, g.p.inter);
  const test::OwnedWeight gu_f = dequantized(gu.ref), dn_f = dequantized(dn.ref);
  const test::OwnedTensor x = test::random_tensor(rng, g.n, g.hidden, /*pad=*/3, 2.0f);
  const test::OwnedTensor logits = test::random_tensor(rng, g.n, g.p.n_experts, 0, 3.0f);
  const MoeWeights blocks{.format = ExpertFormat::GgufBlocks, .gate_up = gu.ref, .down = dn.ref};
  const MoeWeights floats{.format = ExpertFormat::Float, .gate_up = gu_f.ref, .down = dn_f.ref};
  ReferenceBackend ref;
  const std::vector<float> want = run(ref, c, floats, x.ref, logits.ref);
  const std::vector<float> got_ref = run(ref, c, blocks, x.ref, logits.ref);
  ASSERT_EQ(got_ref, want) << "the reference decodes the rows it uses exactly";
  for (Isa isa : test::all_isas()) {
    if (!isa_supported(isa)) continue;
    FastBackend fast(2, isa, 0);
    const bool integer = find_quant_dot(isa, g.gate_up) != nullptr || find_quant_dot(isa, g.down) != nullptr;
    expect_close(run(fast, c, blocks, x.ref, logits.ref), want, integer ? 5e-2 : 1e-4, isa_name(isa));
  }
}

MoeParams qwen_k(std::int64_t top_k, std::int64_t inter) {
  return {.n_experts = 8, .top_k = top_k, .inter = inter, .gating = MoeGating::SoftmaxTopK,
          .norm_topk_prob = true};
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MoeGgufOp,
    ::testing::Values(GgufCase{DType::Q4_K, DType::Q6_K, qwen_k(3, 256), 256, 1},  // Q4_K_M's experts
                      GgufCase{DType::Q4_K, DType::Q6_K, qwen_k(8, 256), 256, 5},
                      GgufCase{DType::Q4_K, DType::Q4_K, qwen_k(1, 256), 512, 11},
                      GgufCase{DType::Q5_K, DType::Q5_K, qwen_k(2, 256), 256, 3},
                      GgufCase{DType::Q6_K, DType::Q8_0, qwen_k(3, 96), 256, 19},  // 3 blocks of 32
                      GgufCase{DType::Q8_0, DType::Q8_0, qwen_k(8, 96), 160, 9},
                      GgufCase{DType::Q8_0, DType::Q5_0, qwen_k(1, 32), 64, 2}),
    [](const auto& info) {
      std::ostringstream os;
      PrintTo(info.param, &os);
      return os.str();
    });

}  // namespace
}  // namespace akv
