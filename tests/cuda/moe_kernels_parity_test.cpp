// The moe op on the CUDA backend against the scalar reference backend: Qwen3-MoE rules (softmax
// over all experts, top-k, norm_topk_prob on and off) and GPT-OSS rules (top-k then softmax,
// expert biases, clamped SwiGLU, interleaved gate/up), F32/BF16/F16/MXFP4 experts, 1 to 300
// tokens: the decode kernels (at most CudaBackend::kMoeDecodeMaxRows rows; pipelined, and the
// two-launch baseline), the grouped prefill beyond (with experts no token picks and one nearly
// every token picks), the per-pair baseline, shapes only the fallbacks take, and decode steps
// recorded and replayed as CUDA graphs.
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
constexpr MoeShape kOdd{"odd_widths", 100, 40, 6, 2, false, true};  // rows not whole 16-byte chunks

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

  static MoeLayer random(const MoeShape& s, DType dtype, bool mxfp4) {
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
    return {.format = mxfp4 ? ExpertFormat::Mxfp4 : ExpertFormat::Float,
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
};

using Kernels = CudaBackend::MoeKernels;
using Decode = CudaBackend::MoeDecodeKernels;

std::string kernels_suffix(const MoeCase& c) {
  return std::string(c.kernels == Kernels::PerPair ? "_per_pair" : c.kernels == Kernels::ExpertLoop ? "_loop" : "") +
         (c.decode == Decode::TwoLaunch ? "_two_launch" : "");
}
std::string case_name(const MoeCase& c) {
  return std::string(c.shape->name) + "_" + (c.mxfp4 ? "mxfp4" : std::string(dtype_name(c.dtype))) + "_n" +
         std::to_string(c.n) + kernels_suffix(c);
}
void PrintTo(const MoeCase& c, std::ostream* os) { *os << case_name(c); }

std::string path_name(const MoeCase& c) {
  if (c.kernels == Kernels::PerPair) return "per-pair baseline";
  if (c.n <= CudaBackend::kMoeDecodeMaxRows)
    return c.decode == Decode::TwoLaunch ? "decode kernels (two launches)" : "decode kernels (pipelined)";
  return c.kernels == Kernels::Grouped ? "grouped prefill (grouped GEMM)" : "grouped prefill (GEMM per expert)";
}

// The grouped prefill rounds x and its intermediates to the experts' half dtype (bf16 for MXFP4),
// like the dense prefill GEMMs; every other path computes in f32.
double tolerance_for(const MoeCase& c) {
  const bool half = c.mxfp4 || c.dtype != DType::F32;
  return c.kernels != Kernels::PerPair && half && c.n > CudaBackend::kMoeDecodeMaxRows ? tolerance(DType::BF16)
                                                                                       : 1e-5;
}

class MoeKernelsOnCuda : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeKernelsOnCuda, MatchReference) {
  AKV_SKIP_WITHOUT_CUDA();
  const MoeCase c = GetParam();
  const MoeLayer l = MoeLayer::random(*c.shape, c.dtype, c.mxfp4);
  MoeIo io(l, c.n);
  io.randomize();
  backends().ref.moe(io.x.cpu, io.logits.cpu, l.weights(false), l.p, io.scratch(false), io.out.cpu);
  const std::int64_t grouped_before = backends().gpu.moe_grouped_gemm_launches();
  backends().gpu.set_moe_kernels(c.kernels);
  backends().gpu.set_moe_decode_kernels(c.decode);
  backends().gpu.moe(io.x.gpu, io.logits.gpu, l.weights(true), l.p, io.scratch(true), io.out.gpu);
  backends().gpu.set_moe_kernels(Kernels::Grouped);
  backends().gpu.set_moe_decode_kernels(Decode::Pipelined);
  // Float experts with 16-byte aligned rows take the grouped GEMM (gate/up and down) in prefill.
  // With odd widths each GEMM's operands are aligned or not by where its experts' rows start
  // (the routing), so either path may run there: only the results are checked.
  const std::int64_t launches = backends().gpu.moe_grouped_gemm_launches() - grouped_before;
  const bool grouped_gemm =
      c.kernels == Kernels::Grouped && !c.mxfp4 && c.n > CudaBackend::kMoeDecodeMaxRows;
  if (c.shape == &kOdd)
    EXPECT_LE(launches, grouped_gemm ? 2 : 0) << case_name(c);
  else
    EXPECT_EQ(launches, grouped_gemm ? 2 : 0)
        << case_name(c) << ": cublasGemmGroupedBatchedEx launches (none: unaligned operands or cuBLAS answered "
        << "NOT_SUPPORTED, so one GEMM per expert ran)";
  const std::vector<float> got = io.out.get_gpu(), want = io.out.get_cpu();
  const double err = note_error(rel_error(got, want));
  std::size_t worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= std::abs(got[worst] - want[worst]))) worst = i;
  EXPECT_LE(err, tolerance_for(c)) << c.shape->name << " " << (c.mxfp4 ? "MXFP4" : dtype_name(c.dtype)) << " n "
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
    v.push_back({&kGptOss, DType::F32, true, n, Kernels::Grouped, Decode::TwoLaunch});
  }
  v.push_back({&kQwen3, DType::F32, false, 1});  // the pipelined decode over every float dtype
  v.push_back({&kQwen3, DType::F16, false, 1});
  v.push_back({&kGptOss, DType::BF16, false, 1});
  for (std::int64_t n : {67, 300}) {
    v.push_back({&kQwen3, DType::BF16, false, n, Kernels::ExpertLoop});
    v.push_back({&kGptOss, DType::F32, false, n, Kernels::ExpertLoop});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, MoeKernelsOnCuda, ::testing::ValuesIn(moe_cases()),
                         [](const auto& info) { return case_name(info.param); });

// Decode steps of n one-token sequences recorded once and replayed (new x and router logits each
// step): routing and experts stay on the device, also past kMoeDecodeMaxRows rows.
TEST(MoeKernelsOnCuda, RecordedDecodeSteps) {
  AKV_SKIP_WITHOUT_CUDA();
  Backends& b = backends();
  for (const bool mxfp4 : {false, true}) {
    const MoeLayer l = MoeLayer::random(mxfp4 ? kGptOss : kQwen3, DType::BF16, mxfp4);
    for (const std::int32_t n : {3, 24}) {
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
        EXPECT_LE(note_error(rel_error(got, io.out.get_cpu())), 1e-5)
            << (mxfp4 ? "gpt_oss MXFP4" : "qwen3_moe BF16") << " n " << n << " step " << step;
      }
      const CudaBackend::StepStats after = b.gpu.step_stats();
      EXPECT_EQ(after.captured - before.captured, 1) << "n " << n;
      EXPECT_EQ(after.replayed - before.replayed, 2) << "n " << n;
    }
  }
}

}  // namespace
}  // namespace akv::test
