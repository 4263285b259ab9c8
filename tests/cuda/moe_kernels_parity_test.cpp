// The moe op on the CUDA backend against the scalar reference backend: Qwen3-MoE rules (softmax
// over all experts, top-k, norm_topk_prob on and off) and GPT-OSS rules (top-k then softmax,
// expert biases, clamped SwiGLU, interleaved gate/up), F32/BF16/F16/MXFP4 experts, 1 to 300
// tokens: the decode kernels (at most CudaBackend::kMoeDecodeMaxRows rows; pipelined, and the
// two-launch baseline), the grouped prefill beyond (with experts no token picks and one nearly
// every token picks), the per-pair baseline, shapes only the fallbacks take, and decode steps
// recorded and replayed as CUDA graphs. GGUF-block experts (Q4_K_M's Q4_K gate/up with Q6_K
// down, and Q4_K, Q5_K, Q8_0, Q4_0, MXFP4) and MXFP4 experts through the int8 decode kernels
// (the default; the f32 ones selectable): decode against the host replay of the int8 activation
// rule (quant_gemv.h) over the oracle's weights, and MXFP4 bit for bit against the same values
// as GGUF MXFP4 blocks; prefill against the reference.
#include <cstring>
#include <numeric>
#include <ostream>
#include <string>

#include "backend/batch.h"
#include "backend/moe.h"
#include "parity_util.h"

namespace akv::test {
namespace {

struct MoeShape {
  const char* name;
  std::int64_t hidden, inter, n_experts, top_k;
  bool gpt_oss;  // else Qwen3-MoE rules
  bool norm_topk_prob;
};
constexpr MoeShape kQwen3{"qwen3_moe", 256, 96, 16, 4, false, true};
constexpr MoeShape kQwen3NoNorm{"qwen3_moe_no_norm", 256, 96, 16, 4, false, false};
constexpr MoeShape kGptOss{"gpt_oss", 192, 96, 12, 4, true, false};
// GPT-OSS-20B's hidden width (90 groups of 32: two staged windows, the second partial; not a
// multiple of 256).
constexpr MoeShape kGptOssWide{"gpt_oss_wide", 2880, 64, 8, 4, true, false};
constexpr MoeShape kOdd{"odd_widths", 100, 40, 6, 2, false, true};  // rows not whole 16-byte chunks
// GGUF-block experts: k-quant rows are whole 256-element blocks; top 8 of 8, top 1.
constexpr MoeShape kQwen3Gguf{"qwen3_moe", 512, 256, 16, 4, false, true};
// Rows longer than the GGUF decode kernels stage at once (2,048 columns: gate/up rows of
// long_rows, down rows of long_down) and more choices than a down warp stages at once (8).
constexpr MoeShape kLongRows{"long_rows", 2080, 64, 12, 10, false, true};
constexpr MoeShape kLongDown{"long_down", 64, 2080, 12, 10, false, true};
constexpr MoeShape kQwen3GgufAll{"qwen3_moe_top8_of_8", 256, 256, 8, 8, false, true};
// GPT-OSS rules with GPT-OSS-20B's expert width: 90 gate/up blocks a choice, 360 a token, more
// than two a multiprocessor, so the int8 decode's gate/up takes its ring of 2-row runs over
// interleaved rows (the narrower shapes' grids fit two slots).
constexpr MoeShape kWideExperts{"gpt_oss_wide_experts", 256, 2880, 6, 4, true, false};
constexpr MoeShape kQwen3GgufOne{"qwen3_moe_top1", 256, 256, 8, 1, false, true};

// Random GGUF blocks of `t` [rows, cols] on both backends: random codes, the f16 scale fields set
// to moderate values (random bits would give inf and NaN), MXFP4 exponents near 1.
std::unique_ptr<WeightPair> random_blocks(DType t, std::int64_t rows, std::int64_t cols) {
  auto w = std::make_unique<WeightPair>();
  std::mt19937& g = rng();
  w->bytes.resize(dtype_row_bytes(t, cols) * static_cast<std::size_t>(rows));
  for (auto& b : w->bytes) b = static_cast<std::uint8_t>(g());
  const auto put_f16 = [&g](std::uint8_t* p, float lo, float hi) {
    const std::uint16_t h = f32_to_f16(std::uniform_real_distribution<float>(lo, hi)(g));
    std::memcpy(p, &h, 2);
  };
  const auto block_bytes = static_cast<std::size_t>(dtype_block_bytes(t));
  for (std::size_t off = 0; off < w->bytes.size(); off += block_bytes) {
    std::uint8_t* b = w->bytes.data() + off;
    switch (t) {
      case DType::Q8_0: put_f16(b, 1e-3f, 2e-3f); break;
      case DType::Q4_0: put_f16(b, 1e-2f, 2e-2f); break;
      case DType::MXFP4: b[0] = static_cast<std::uint8_t>(120 + g() % 4); break;
      case DType::Q4_K:
      case DType::Q5_K:
        put_f16(b, 1e-3f, 2e-3f);
        put_f16(b + 2, 1e-3f, 2e-3f);
        break;
      case DType::Q6_K: put_f16(b + 208, 1e-4f, 2e-4f); break;
      default: ADD_FAILURE() << "no random blocks for " << dtype_name(t);
    }
  }
  w->info.name = "blocks";
  w->info.dtype = t;
  w->info.shape = {rows, cols};
  w->info.bytes = w->bytes;
  w->cpu = backends().ref.upload_weight(w->info);
  w->gpu = backends().gpu.upload_weight(w->info);
  return w;
}

// A U8 weight [rows, bytes_per_row] of random bytes in [lo, hi] on both backends, presented with
// `cols` as its logical width (MoeWeights' MXFP4 convention).
std::unique_ptr<WeightPair> random_bytes(std::int64_t rows, std::int64_t bytes_per_row, std::int64_t cols, int lo,
                                         int hi) {
  auto w = std::make_unique<WeightPair>();
  std::uniform_int_distribution<int> d(lo, hi);
  w->bytes.resize(static_cast<std::size_t>(rows * bytes_per_row));
  for (auto& b : w->bytes) b = static_cast<std::uint8_t>(d(rng()));
  w->info.name = "mxfp4";
  w->info.dtype = DType::U8;
  w->info.shape = {rows, bytes_per_row};
  w->info.bytes = w->bytes;
  w->cpu = backends().ref.upload_weight(w->info);
  w->gpu = backends().gpu.upload_weight(w->info);
  w->cpu.cols = w->gpu.cols = cols;
  return w;
}

// One MoE layer's random experts on both backends.
struct MoeLayer {
  MoeShape shape;
  MoeParams p;
  bool mxfp4 = false;
  std::unique_ptr<WeightPair> gu, dn, gu_scales, dn_scales, gu_bias, dn_bias;

  // dtype quantized: GGUF blocks, gate/up of `dtype` and down of `down`.
  static MoeLayer random(const MoeShape& s, DType dtype, bool mxfp4, DType down = DType::F32) {
    MoeLayer l;
    l.shape = s;
    l.mxfp4 = mxfp4;
    l.p = {.n_experts = s.n_experts, .top_k = s.top_k, .inter = s.inter, .gating = MoeGating::SoftmaxTopK,
           .norm_topk_prob = s.norm_topk_prob};
    if (s.gpt_oss)
      l.p = {.n_experts = s.n_experts, .top_k = s.top_k, .inter = s.inter, .gating = MoeGating::TopKSoftmax,
             .act = ExpertActivation::ClampedSwiglu, .swiglu_limit = 7.0f, .swiglu_alpha = 1.702f,
             .interleaved_gate_up = true};
    const std::int64_t e = s.n_experts, hidden = s.hidden, inter = s.inter;
    if (mxfp4) {
      l.gu = random_bytes(e * 2 * inter, hidden / 2, hidden, 0, 255);
      l.gu_scales = random_bytes(e * 2 * inter, hidden / 32, hidden / 32, 120, 124);
      l.dn = random_bytes(e * hidden, inter / 2, inter, 0, 255);
      l.dn_scales = random_bytes(e * hidden, inter / 32, inter / 32, 120, 124);
    } else if (dtype_is_quantized(dtype)) {
      l.gu = random_blocks(dtype, e * 2 * inter, hidden);
      l.dn = random_blocks(down, e * hidden, inter);
    } else {
      l.gu = WeightPair::random(dtype, e * 2 * inter, hidden, 1.0f / std::sqrt(float(hidden)));
      l.dn = WeightPair::random(dtype, e * hidden, inter, 1.0f / std::sqrt(float(inter)));
    }
    if (s.gpt_oss) {
      l.gu_bias = WeightPair::random(DType::F32, e, 2 * inter, 0.5f);
      l.dn_bias = WeightPair::random(DType::F32, e, hidden, 0.5f);
    }
    return l;
  }
  MoeWeights weights(bool gpu) const {
    auto pick = [gpu](const std::unique_ptr<WeightPair>& w) { return w ? (gpu ? w->gpu : w->cpu) : WeightRef{}; };
    const ExpertFormat f = mxfp4                                ? ExpertFormat::Mxfp4
                           : dtype_is_quantized(gu->info.dtype) ? ExpertFormat::GgufBlocks
                                                                : ExpertFormat::Float;
    return {.format = f,
            .gate_up = pick(gu),
            .down = pick(dn),
            .gate_up_scales = pick(gu_scales),
            .down_scales = pick(dn_scales),
            .gate_up_bias = pick(gu_bias),
            .down_bias = pick(dn_bias)};
  }
};

// Router logits [n, n_experts]: random, with the first two experts never in anyone's top k and
// the last one in nearly everyone's (empty and crowded experts in the grouped prefill).
std::vector<float> skewed_logits(std::int64_t n, std::int64_t n_experts) {
  std::vector<float> v = random_floats(static_cast<std::size_t>(n * n_experts), 2.0f);
  for (std::int64_t t = 0; t < n; ++t) {
    v[t * n_experts + 0] -= 40.0f;
    v[t * n_experts + 1] -= 40.0f;
    v[t * n_experts + n_experts - 1] += 4.0f;
  }
  return v;
}

// The op's buffers for n tokens on both backends (x and the logits strided views).
struct MoeIo {
  Pair x, logits, route, gate_up, act, down, out;
  MoeIo(const MoeLayer& l, std::int64_t n)
      : x(Pair::make(n, l.shape.hidden, 6)),
        logits(Pair::make(n, l.p.n_experts, 2)),
        route(Pair::make(n, 2 * l.p.top_k)),
        gate_up(Pair::make(n * l.p.top_k, 2 * l.p.inter, 8)),  // strided, rows 16-byte aligned
        act(Pair::make(n * l.p.top_k, l.p.inter)),
        down(Pair::make(n * l.p.top_k, l.shape.hidden)),
        out(Pair::make(n, l.shape.hidden, 2)) {}
  void randomize() {
    x.set(random_floats(static_cast<std::size_t>(x.cpu.rows * x.cpu.cols), 1.5f));
    logits.set(skewed_logits(logits.cpu.rows, logits.cpu.cols));
    out.poison_gpu();
  }
  MoeScratch scratch(bool gpu) const {
    return gpu ? MoeScratch{route.gpu, gate_up.gpu, act.gpu, down.gpu}
               : MoeScratch{route.cpu, gate_up.cpu, act.cpu, down.cpu};
  }
};

struct MoeCase {
  const MoeShape* shape;
  DType dtype;
  bool mxfp4;
  std::int64_t n;
  CudaBackend::MoeKernels kernels = CudaBackend::MoeKernels::Grouped;
  CudaBackend::MoeDecodeKernels decode = CudaBackend::MoeDecodeKernels::Pipelined;
  DType down = DType::F32;  // GGUF blocks (dtype quantized): down's block type
  CudaBackend::MoeMxfp4Decode mx = CudaBackend::MoeMxfp4Decode::Int8;  // MXFP4 experts' decode
  cuda::MoeQuantStaging staging = cuda::MoeQuantStaging::Runs;        // the int8 decode's
};

using Kernels = CudaBackend::MoeKernels;
using Decode = CudaBackend::MoeDecodeKernels;
using Mxfp4Decode = CudaBackend::MoeMxfp4Decode;

std::string kernels_suffix(const MoeCase& c) {
  return std::string(c.kernels == Kernels::PerPair      ? "_per_pair"
                     : c.kernels == Kernels::ExpertLoop ? "_loop"
                                                        : "") +
         (c.decode == Decode::TwoLaunch ? "_two_launch" : "") +
         (c.mxfp4 && c.mx == Mxfp4Decode::F32 ? "_f32_decode" : "") +
         (c.staging == cuda::MoeQuantStaging::Windows ? "_windows" : "");
}
std::string case_name(const MoeCase& c) {
  const std::string types = c.mxfp4                      ? "mxfp4"
                            : dtype_is_quantized(c.dtype) ? std::string(dtype_name(c.dtype)) + "_" +
                                                                std::string(dtype_name(c.down))
                                                          : std::string(dtype_name(c.dtype));
  return std::string(c.shape->name) + "_" + types + "_n" + std::to_string(c.n) + kernels_suffix(c);
}
void PrintTo(const MoeCase& c, std::ostream* os) { *os << case_name(c); }

bool gguf(const MoeCase& c) { return dtype_is_quantized(c.dtype); }
// The int8 decode kernels (moe_decode_quant.cu): GGUF blocks in eager steps up to
// kMoeDecodeMaxRows and in per-pair mode; MXFP4 in eager steps up to kMoeDecodeMaxRows unless
// the f32 decode or the per-pair kernels are chosen. More rows: the grouped prefill.
bool int8_decode(const MoeCase& c) {
  if (gguf(c)) return c.n <= CudaBackend::kMoeDecodeMaxRows || c.kernels == Kernels::PerPair;
  return c.mxfp4 && c.mx == Mxfp4Decode::Int8 && c.kernels != Kernels::PerPair &&
         c.n <= CudaBackend::kMoeDecodeMaxRows;
}

std::string path_name(const MoeCase& c) {
  if (int8_decode(c))
    return c.mxfp4 ? "int8 decode kernels (MXFP4 as released)" : "GGUF decode kernels";
  if (c.kernels == Kernels::PerPair) return "per-pair baseline";
  if (c.n <= CudaBackend::kMoeDecodeMaxRows)
    return c.decode == Decode::TwoLaunch ? "decode kernels (two launches)" : "decode kernels (pipelined)";
  return c.kernels == Kernels::Grouped ? "grouped prefill (grouped GEMM)" : "grouped prefill (GEMM per expert)";
}

// The int8 kernels against the int8 replay: the replay sums gate/up in double, the kernels in f32,
// so an activation within ~1e-6 of a rounding boundary can take the neighbouring int8 code (with
// thousands of activations a call, a few such flips are common). One flip moves its token's
// output by about amax / (127 rms sqrt(top_k * inter)) relative (~7e-4 at top 4 of width 256),
// so a few flips among 8 tokens reach 1e-3 (seen at 1.02e-3 on one draw); a wrong row or scale
// is far above 2e-3. The runs and the windowed staging, which compute the same activations, are
// held to each other at 1e-5 (MatchReference).
constexpr double kInt8ReplayTolerance = 2e-3;

// The grouped prefill rounds x and its intermediates to the experts' half dtype (bf16 for MXFP4),
// like the dense prefill GEMMs; every other path computes in f32.
double tolerance_for(const MoeCase& c) {
  if (int8_decode(c)) return kInt8ReplayTolerance;
  const bool half = c.mxfp4 || c.dtype != DType::F32;
  return c.kernels != Kernels::PerPair && half && c.n > CudaBackend::kMoeDecodeMaxRows ? tolerance(DType::BF16)
                                                                                       : 1e-5;
}

// The int8 rule of quant_gemv.h on the host: x [cols] as the GEMV sees it, amax / 127 per group
// of 32 and round half to even (the host's default rounding mode), code times scale.
std::vector<double> int8_rounded(const float* x, std::int64_t cols) {
  std::vector<double> out(static_cast<std::size_t>(cols));
  for (std::int64_t g = 0; g < cols; g += 32) {
    float amax = 0.0f;
    for (std::int64_t c = g; c < g + 32; ++c) amax = std::max(amax, std::abs(x[c]));
    const float d = amax / 127.0f;
    for (std::int64_t c = g; c < g + 32; ++c)
      out[c] = amax == 0.0f ? 0.0 : double(std::nearbyint(x[c] / d)) * double(d);
  }
  return out;
}

// The int8 decode kernels' result on the host: the reference's rules (routing, activation,
// weighted sum) over the oracle's weights, with x and the activations int8-rounded first.
std::vector<float> int8_decode_replay(const MoeLayer& l, MoeIo& io) {
  const MoeWeights w = l.weights(false);
  const MoeParams& p = l.p;
  const std::int64_t hidden = l.shape.hidden, inter = p.inter, n = io.x.cpu.rows;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(p.top_k));
  std::vector<float> wt(ids.size()), row(static_cast<std::size_t>(std::max(hidden, inter))),
      act(static_cast<std::size_t>(inter)), y(static_cast<std::size_t>(n * hidden));
  const auto bias = [](const WeightRef& b, std::int64_t i) { return b.empty() ? 0.0 : load_f32(b.data, b.dtype, i); };
  for (std::int64_t t = 0; t < n; ++t) {
    route_experts({io.logits.cpu.row<const float>(t), static_cast<std::size_t>(p.n_experts)}, p, ids, wt);
    const std::vector<double> xq = int8_rounded(io.x.cpu.row<const float>(t), hidden);
    std::vector<double> acc(static_cast<std::size_t>(hidden), 0.0);
    for (std::int64_t i = 0; i < p.top_k; ++i) {
      const std::int64_t e = ids[i];
      for (std::int64_t j = 0; j < inter; ++j) {
        double gu[2];
        for (int h = 0; h < 2; ++h) {
          const std::int64_t r = e * 2 * inter + (p.interleaved_gate_up ? 2 * j + h : j + h * inter);
          expert_matrix_row(w.format, w.gate_up, w.gate_up_scales, r, row.data());
          double dot = bias(w.gate_up_bias, r);
          for (std::int64_t c = 0; c < hidden; ++c) dot += xq[c] * row[c];
          gu[h] = dot;
        }
        act[j] = expert_activation(static_cast<float>(gu[0]), static_cast<float>(gu[1]), p);
      }
      const std::vector<double> aq = int8_rounded(act.data(), inter);
      for (std::int64_t r = 0; r < hidden; ++r) {
        expert_matrix_row(w.format, w.down, w.down_scales, e * hidden + r, row.data());
        double dot = bias(w.down_bias, e * hidden + r);
        for (std::int64_t c = 0; c < inter; ++c) dot += aq[c] * row[c];
        acc[r] += double(wt[i]) * dot;
      }
    }
    for (std::int64_t c = 0; c < hidden; ++c) y[t * hidden + c] = static_cast<float>(acc[c]);
  }
  return y;
}

class MoeKernelsOnCuda : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeKernelsOnCuda, MatchReference) {
  AKV_SKIP_WITHOUT_CUDA();
  const MoeCase c = GetParam();
  const MoeLayer l = MoeLayer::random(*c.shape, c.dtype, c.mxfp4, c.down);
  MoeIo io(l, c.n);
  io.randomize();
  backends().ref.moe(io.x.cpu, io.logits.cpu, l.weights(false), l.p, io.scratch(false), io.out.cpu);
  const std::int64_t grouped_before = backends().gpu.moe_grouped_gemm_launches();
  backends().gpu.set_moe_kernels(c.kernels);
  backends().gpu.set_moe_decode_kernels(c.decode);
  backends().gpu.set_moe_mxfp4_decode(c.mx);
  backends().gpu.set_moe_quant_staging(c.staging);
  backends().gpu.moe(io.x.gpu, io.logits.gpu, l.weights(true), l.p, io.scratch(true), io.out.gpu);
  backends().gpu.set_moe_kernels(Kernels::Grouped);
  backends().gpu.set_moe_decode_kernels(Decode::Pipelined);
  backends().gpu.set_moe_mxfp4_decode(Mxfp4Decode::Int8);
  backends().gpu.set_moe_quant_staging(cuda::MoeQuantStaging::Runs);
  // Float experts with 16-byte aligned rows take the grouped GEMM (gate/up and down) in prefill.
  // With odd widths each GEMM's operands are aligned or not by where its experts' rows start
  // (the routing), so either path may run there: only the results are checked.
  const std::int64_t launches = backends().gpu.moe_grouped_gemm_launches() - grouped_before;
  const bool grouped_gemm =
      c.kernels == Kernels::Grouped && !c.mxfp4 && !gguf(c) && c.n > CudaBackend::kMoeDecodeMaxRows;
  if (c.shape == &kOdd)
    EXPECT_LE(launches, grouped_gemm ? 2 : 0) << case_name(c);
  else
    EXPECT_EQ(launches, grouped_gemm ? 2 : 0)
        << case_name(c) << ": cublasGemmGroupedBatchedEx launches (none: unaligned operands or cuBLAS answered "
        << "NOT_SUPPORTED, so one GEMM per expert ran)";
  const std::vector<float> got = io.out.get_gpu(),
                           want = int8_decode(c) ? int8_decode_replay(l, io) : io.out.get_cpu();
  if (int8_decode(c)) {  // and the replay is within the int8 rounding of the oracle
    EXPECT_LE(rel_error(want, io.out.get_cpu()), 5e-2) << case_name(c);
  }
  if (int8_decode(c) && c.staging == cuda::MoeQuantStaging::Runs) {
    // The same activations either way (gate/up's sums bit for bit): only down's order differs.
    std::vector<float> windowed(got.size());
    backends().gpu.set_moe_quant_staging(cuda::MoeQuantStaging::Windows);
    backends().gpu.set_moe_kernels(c.kernels);
    backends().gpu.moe(io.x.gpu, io.logits.gpu, l.weights(true), l.p, io.scratch(true), io.out.gpu);
    backends().gpu.set_moe_kernels(Kernels::Grouped);
    backends().gpu.set_moe_quant_staging(cuda::MoeQuantStaging::Runs);
    backends().gpu.download(io.out.gpu, windowed);
    EXPECT_LE(rel_error(got, windowed), 1e-5) << case_name(c) << ": runs against windows";
  }
  const double err = note_error(rel_error(got, want));
  std::size_t worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= std::abs(got[worst] - want[worst]))) worst = i;
  EXPECT_LE(err, tolerance_for(c)) << case_name(c) << " n "
                                   << c.n << " via " << path_name(c) << ": worst element token "
                                   << worst / l.shape.hidden << " column " << worst % l.shape.hidden << " got "
                                   << got[worst] << " want " << want[worst];
}

std::vector<MoeCase> moe_cases() {
  std::vector<MoeCase> v;
  for (std::int64_t n : {1, 3, 8, 67, 300}) {
    v.push_back({&kQwen3, DType::BF16, false, n});
    v.push_back({&kGptOss, DType::F32, true, n});
  }
  for (std::int64_t n : {3, 67}) {
    v.push_back({&kQwen3, DType::F32, false, n});
    v.push_back({&kQwen3, DType::F16, false, n});
    v.push_back({&kQwen3NoNorm, DType::BF16, false, n});
    v.push_back({&kGptOss, DType::BF16, false, n});
    v.push_back({&kGptOss, DType::F32, false, n});
    v.push_back({&kOdd, DType::BF16, false, n});
    v.push_back({&kQwen3, DType::BF16, false, n, Kernels::PerPair});
    v.push_back({&kGptOss, DType::F32, true, n, Kernels::PerPair});
  }
  for (std::int64_t n : {1, 3, 8}) {  // the decode kernels the pipelined ones replaced
    v.push_back({&kQwen3, DType::BF16, false, n, Kernels::Grouped, Decode::TwoLaunch});
    v.push_back({&kGptOss, DType::F32, true, n, Kernels::Grouped, Decode::TwoLaunch, DType::F32,
                 Mxfp4Decode::F32});
    // MXFP4's f32 decode (pipelined), which the int8 kernels replaced as the default.
    v.push_back({&kGptOss, DType::F32, true, n, Kernels::Grouped, Decode::Pipelined, DType::F32,
                 Mxfp4Decode::F32});
    // MXFP4 through the int8 kernels: GPT-OSS-20B's hidden width (a partial second window),
    // Qwen3 rules (split gate/up, no biases), expert rows longer than a window and more choices
    // than a down warp stages at once.
    v.push_back({&kGptOssWide, DType::F32, true, n});
    v.push_back({&kQwen3, DType::F32, true, n});
    v.push_back({&kLongDown, DType::F32, true, n});
    v.push_back({&kLongRows, DType::F32, true, n});
  }
  v.push_back({&kQwen3, DType::F32, false, 1});  // the pipelined decode over every float dtype
  v.push_back({&kQwen3, DType::F16, false, 1});
  v.push_back({&kGptOss, DType::BF16, false, 1});
  for (std::int64_t n : {67, 300}) {
    v.push_back({&kQwen3, DType::BF16, false, n, Kernels::ExpertLoop});
    v.push_back({&kGptOss, DType::F32, false, n, Kernels::ExpertLoop});
  }
  // GGUF blocks: Q4_K_M's expert types at decode sizes, a batch the decode kernels take only in
  // per-pair mode (64) and prefill (64 eager, 300); the other types, biases and interleaved
  // gate/up (GPT-OSS rules), top 1 and top 8 of 8, rows longer than one staged window and more
  // choices than a down warp stages at once.
  const auto q = [](const MoeShape* s, DType gu, DType dn, std::int64_t n, Kernels k = Kernels::Grouped) {
    return MoeCase{s, gu, false, n, k, Decode::Pipelined, dn};
  };
  for (std::int64_t n : {1, 2, 8, 64, 300}) v.push_back(q(&kQwen3Gguf, DType::Q4_K, DType::Q6_K, n));
  v.push_back(q(&kQwen3Gguf, DType::Q4_K, DType::Q6_K, 64, Kernels::PerPair));
  for (std::int64_t n : {1, 67}) {
    v.push_back(q(&kQwen3Gguf, DType::Q4_K, DType::Q4_K, n));
    v.push_back(q(&kQwen3Gguf, DType::Q5_K, DType::Q8_0, n));
    v.push_back(q(&kQwen3GgufAll, DType::Q6_K, DType::Q5_K, n));
    v.push_back(q(&kQwen3GgufOne, DType::Q8_0, DType::Q4_K, n));
    v.push_back(q(&kGptOss, DType::Q8_0, DType::Q4_0, n));
    v.push_back(q(&kGptOss, DType::MXFP4, DType::MXFP4, n));
    v.push_back(q(&kGptOssWide, DType::MXFP4, DType::MXFP4, n));
  }
  for (std::int64_t n : {1, 2}) {
    v.push_back(q(&kWideExperts, DType::MXFP4, DType::MXFP4, n));
    v.push_back(q(&kWideExperts, DType::Q8_0, DType::Q4_0, n));
    v.push_back({&kWideExperts, DType::F32, true, n});  // MXFP4 as released
  }
  for (std::int64_t n : {1, 3}) {
    v.push_back(q(&kLongRows, DType::Q8_0, DType::Q4_0, n));
    v.push_back(q(&kLongDown, DType::Q4_0, DType::Q8_0, n));
  }
  // The windowed staging, which the runs replaced where a block's whole rows fit (and which
  // still takes long_down's down; long_rows' gate/up takes the ring of 2-row runs).
  const auto windows = [](MoeCase c) {
    c.staging = cuda::MoeQuantStaging::Windows;
    return c;
  };
  for (std::int64_t n : {1, 8}) {
    v.push_back(windows(q(&kQwen3Gguf, DType::Q4_K, DType::Q6_K, n)));
    v.push_back(windows(q(&kGptOss, DType::Q8_0, DType::Q4_0, n)));
    v.push_back(windows({&kGptOssWide, DType::F32, true, n}));
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, MoeKernelsOnCuda, ::testing::ValuesIn(moe_cases()),
                         [](const auto& info) { return case_name(info.param); });

// Decode steps of n one-token sequences recorded once and replayed (new x and router logits each
// step): routing and experts stay on the device, also past kMoeDecodeMaxRows rows; float, MXFP4
// and GGUF-block experts.
TEST(MoeKernelsOnCuda, RecordedDecodeSteps) {
  AKV_SKIP_WITHOUT_CUDA();
  Backends& b = backends();
  // bf16, MXFP4 (int8 decode), GGUF blocks (Q4_K gate/up, Q6_K down), MXFP4 (f32 decode)
  for (const int kind : {0, 1, 2, 3}) {
    const bool mxfp4 = kind == 1 || kind == 3, blocks = kind == 2, int8 = kind == 1 || kind == 2;
    const MoeLayer l = blocks ? MoeLayer::random(kQwen3Gguf, DType::Q4_K, false, DType::Q6_K)
                              : MoeLayer::random(mxfp4 ? kGptOss : kQwen3, DType::BF16, mxfp4);
    const char* name = blocks      ? "qwen3_moe Q4_K/Q6_K"
                       : kind == 1 ? "gpt_oss MXFP4 (int8)"
                       : mxfp4     ? "gpt_oss MXFP4 (f32)"
                                   : "qwen3_moe BF16";
    b.gpu.set_moe_mxfp4_decode(kind == 3 ? Mxfp4Decode::F32 : Mxfp4Decode::Int8);
    for (const std::int32_t n : {3, 24, 64}) {
      MoeIo io(l, n);
      const DecodeBatch d(b.gpu, n);
      const CudaBackend::StepStats before = b.gpu.step_stats();
      for (int step = 0; step < 3; ++step) {
        io.randomize();
        std::vector<float> got(static_cast<std::size_t>(n * l.shape.hidden));
        b.gpu.begin_step(d.batch, d.kv, &d.layout);
        b.gpu.moe(io.x.gpu, io.logits.gpu, l.weights(true), l.p, io.scratch(true), io.out.gpu);
        b.gpu.download(io.out.gpu, got);
        b.gpu.end_step();
        b.ref.moe(io.x.cpu, io.logits.cpu, l.weights(false), l.p, io.scratch(false), io.out.cpu);
        const std::vector<float> want = int8 ? int8_decode_replay(l, io) : io.out.get_cpu();
        EXPECT_LE(note_error(rel_error(got, want)), int8 ? kInt8ReplayTolerance : 1e-5)
            << name << " n " << n << " step " << step;
      }
      const CudaBackend::StepStats after = b.gpu.step_stats();
      EXPECT_EQ(after.captured - before.captured, 1) << "n " << n;
      EXPECT_EQ(after.replayed - before.replayed, 2) << "n " << n;
    }
  }
  b.gpu.set_moe_mxfp4_decode(Mxfp4Decode::Int8);
}

// `w` [rows, bytes of cols / 2] and `scales` [rows, cols / 32] (MXFP4 as released) as GGUF MXFP4
// blocks [rows, cols] of the same values (mxfp4_row_to_gguf_blocks) on both backends.
std::unique_ptr<WeightPair> gguf_mxfp4_of(const WeightPair& w, const WeightPair& scales) {
  const std::int64_t rows = w.info.shape[0], cols = w.cpu.cols;
  auto g = std::make_unique<WeightPair>();
  const std::size_t row_bytes = dtype_row_bytes(DType::MXFP4, cols);
  g->bytes.resize(row_bytes * static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r)
    mxfp4_row_to_gguf_blocks(w.bytes.data() + r * (cols / 2), scales.bytes.data() + r * (cols / 32),
                             cols, g->bytes.data() + static_cast<std::size_t>(r) * row_bytes);
  g->info.name = "gguf_mxfp4";
  g->info.dtype = DType::MXFP4;
  g->info.shape = {rows, cols};
  g->info.bytes = g->bytes;
  g->cpu = backends().ref.upload_weight(g->info);
  g->gpu = backends().gpu.upload_weight(g->info);
  return g;
}

// MXFP4 experts as released and the same values as GGUF MXFP4 blocks through the int8 decode
// kernels: each lane decodes the same codes and scales and sums in the same order, so the outputs
// are equal bit for bit (eager steps and a recorded one; biases, interleaved gate/up; rows staged
// as runs and as windows).
TEST(MoeKernelsOnCuda, Mxfp4AsReleasedMatchesItsGgufBlocksBitForBit) {
  AKV_SKIP_WITHOUT_CUDA();
  Backends& b = backends();
  for (const auto staging : {cuda::MoeQuantStaging::Runs, cuda::MoeQuantStaging::Windows}) {
    for (const MoeShape* s : {&kGptOss, &kGptOssWide, &kLongDown, &kLongRows, &kWideExperts}) {
      b.gpu.set_moe_quant_staging(staging);
      const MoeLayer l = MoeLayer::random(*s, DType::F32, true);
      const std::unique_ptr<WeightPair> gu = gguf_mxfp4_of(*l.gu, *l.gu_scales),
                                        dn = gguf_mxfp4_of(*l.dn, *l.dn_scales);
      const MoeWeights released = l.weights(true);
      MoeWeights blocks_w = released;
      blocks_w.format = ExpertFormat::GgufBlocks;
      blocks_w.gate_up = gu->gpu;
      blocks_w.down = dn->gpu;
      blocks_w.gate_up_scales = blocks_w.down_scales = {};
      for (const std::int32_t n : {1, 3, 8, 24}) {
        MoeIo io(l, n);
        io.randomize();
        const bool record = n > CudaBackend::kMoeDecodeMaxRows;  // eager 24 rows: the grouped prefill
        const DecodeBatch d_released(b.gpu, n), d_blocks(b.gpu, n);  // a recording each
        std::vector<float> split(static_cast<std::size_t>(n * s->hidden)), blocks(split.size());
        for (const bool as_blocks : {false, true}) {
          const DecodeBatch& d = as_blocks ? d_blocks : d_released;
          if (record) b.gpu.begin_step(d.batch, d.kv, &d.layout);
          b.gpu.moe(io.x.gpu, io.logits.gpu, as_blocks ? blocks_w : released, l.p, io.scratch(true),
                    io.out.gpu);
          b.gpu.download(io.out.gpu, as_blocks ? blocks : split);
          if (record) b.gpu.end_step();
          io.out.poison_gpu();
        }
        EXPECT_EQ(std::memcmp(split.data(), blocks.data(), split.size() * sizeof(float)), 0)
            << s->name << " n " << n << (staging == cuda::MoeQuantStaging::Windows ? " windows" : " runs")
            << ": relative difference " << rel_error(split, blocks);
      }
    }
  }
  b.gpu.set_moe_quant_staging(cuda::MoeQuantStaging::Runs);
}

}  // namespace
}  // namespace akv::test
