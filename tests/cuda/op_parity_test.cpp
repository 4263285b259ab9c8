// Every CUDA op against the scalar reference on fresh random inputs, per-dtype tolerances
// (relative norm error: f32 1e-5, f16 2e-3, bf16 1e-2). GPU outputs are poisoned with NaN first,
// so an element a kernel forgets to write fails the comparison.
#include <algorithm>
#include <limits>
#include <numeric>
#include <span>
#include <string>

#include <cuda_runtime.h>

#include <cstring>

#include "attention_util.h"
#include "backend/cuda/gemm_plans.h"
#include "parity_util.h"

namespace akv::test {
namespace {

const auto* const kPrintErrors = ::testing::AddGlobalTestEnvironment(new PrintWorstErrors);

constexpr DType kFloatTypes[] = {DType::F32, DType::BF16, DType::F16};

TEST(CudaOps, Embed) {
  AKV_SKIP_WITHOUT_CUDA();
  for (DType t : kFloatTypes) {
    auto table = WeightPair::random(t, 100, 96, 1.0f);
    std::vector<std::int32_t> ids(13);
    for (auto& id : ids) id = static_cast<std::int32_t>(rng()() % 100);
    Pair out = Pair::make(13, 96, 8);
    out.poison_gpu();
    backends().ref.embed(table->cpu, ids, 1.5f, out.cpu);
    backends().gpu.embed(table->gpu, ids, 1.5f, out.gpu);
    EXPECT_LE(out.error(), 1e-6) << dtype_name(t);
  }
}

TEST(CudaOps, RmsNormRowsAndHeadsInPlace) {
  AKV_SKIP_WITHOUT_CUDA();
  for (DType t : kFloatTypes) {
    for (std::int64_t cols : {64, 1024, 4096}) {
      auto w = WeightPair::random(t, 1, cols, 1.0f, true);
      Pair x = Pair::random(7, cols, 16), out = Pair::make(7, cols);
      out.poison_gpu();
      backends().ref.rms_norm(x.cpu, w->cpu, 1e-5f, 0.0f, out.cpu);
      backends().gpu.rms_norm(x.gpu, w->gpu, 1e-5f, 0.0f, out.gpu);
      EXPECT_LE(out.error(), 1e-5) << dtype_name(t) << " cols " << cols;
    }
    // Per-head norm (group = head_dim) in place on a strided slice, Gemma offset.
    auto w = WeightPair::random(t, 1, 64, 0.5f, true);
    Pair x = Pair::random(5, 8 * 64, 3 * 64);
    backends().ref.rms_norm(x.cpu, w->cpu, 1e-6f, 1.0f, x.cpu);
    backends().gpu.rms_norm(x.gpu, w->gpu, 1e-6f, 1.0f, x.gpu);
    EXPECT_LE(x.error(), 1e-5) << dtype_name(t) << " per head";
  }
}

// The GEMV and the skinny GEMM (n <= 8) keep f32 activations; cuBLAS rounds them to the
// weight dtype.
bool keeps_f32_activations(DType, std::int64_t n, std::int64_t) { return n <= 8; }

TEST(CudaOps, MatmulGemvAndGemm) {
  AKV_SKIP_WITHOUT_CUDA();
  for (DType t : kFloatTypes) {
    for (std::int64_t n : {1, 2, 3, 5, 8, 9, 17, 40, 64, 65}) {
      for (std::int64_t k : {64, 200, 512, 999, 1000}) {
        const std::int64_t m = 72 + (k % 7);
        auto w = WeightPair::random(t, m, k, 1.0f / std::sqrt(float(k)));
        auto bias = WeightPair::random(t, 1, m, 0.1f, true);
        const bool with_bias = (n + k) % 2 == 1;
        Pair x = Pair::random(n, k, (n % 2) * 8), out = Pair::make(n, m, 4);
        out.poison_gpu();
        backends().ref.matmul(x.cpu, w->cpu, with_bias ? &bias->cpu : nullptr, out.cpu);
        backends().gpu.matmul(x.gpu, w->gpu, with_bias ? &bias->gpu : nullptr, out.gpu);
        const double tol = keeps_f32_activations(t, n, k) ? 1e-5 : tolerance(t);
        EXPECT_LE(out.error(), tol) << dtype_name(t) << " n " << n << " k " << k;
      }
    }
  }
}

// Three weights of one width in one call (the q/k/v GEMV launch; cuBLAS for n > 8), with and
// without biases, into column slices of one output (as run_attention does).
TEST(CudaOps, MatmulMultiQkv) {
  AKV_SKIP_WITHOUT_CUDA();
  for (DType t : kFloatTypes) {
    for (std::int64_t n : {1, 2, 4, 7, 12, 33, 64}) {
      for (std::int64_t k : {256, 1000, 4096}) {
        const std::int64_t mq = 200 + (k % 5), mkv = 37;
        auto wq = WeightPair::random(t, mq, k, 1.0f / std::sqrt(float(k)));
        auto wk = WeightPair::random(t, mkv, k, 1.0f / std::sqrt(float(k)));
        auto wv = WeightPair::random(t, mkv, k, 1.0f / std::sqrt(float(k)));
        auto bq = WeightPair::random(t, 1, mq, 0.1f, true);
        auto bk = WeightPair::random(t, 1, mkv, 0.1f, true);
        auto bv = WeightPair::random(t, 1, mkv, 0.1f, true);
        const bool with_bias = n % 2 == 1;
        Pair x = Pair::random(n, k, 8), out = Pair::make(n, mq + 2 * mkv, 4);
        out.poison_gpu();
        auto targets = [&](auto side) {
          auto o = side(out);
          const WeightRef* none = nullptr;
          return std::vector<MatmulTarget>{
              {&side(*wq), with_bias ? &side(*bq) : none, o.cols_slice(0, mq)},
              {&side(*wk), with_bias ? &side(*bk) : none, o.cols_slice(mq, mkv)},
              {&side(*wv), with_bias ? &side(*bv) : none, o.cols_slice(mq + mkv, mkv)}};
        };
        const auto cpu_t = targets([](auto& p) -> auto& { return p.cpu; });
        const auto gpu_t = targets([](auto& p) -> auto& { return p.gpu; });
        backends().ref.matmul_multi(x.cpu, cpu_t);
        backends().gpu.matmul_multi(x.gpu, gpu_t);
        const double tol = keeps_f32_activations(t, n, k) ? 1e-5 : tolerance(t);
        EXPECT_LE(out.error(), tol) << dtype_name(t) << " n " << n << " k " << k;
      }
    }
  }
}

// The skinny GEMM (2..8 rows, BF16 weights) over many row tiles, with and without k split over
// blocks (k 4096 splits, the 9000-row weight fills the GPU unsplit), k not a multiple of its
// 64-wide steps, rows of x at a stride; 17-64 rows on cuBLAS.
TEST(CudaOps, MatmulSkinnyRows) {
  AKV_SKIP_WITHOUT_CUDA();
  for (std::int64_t n : {2, 3, 5, 8, 17, 32, 64}) {
    for (const auto& [m, k] : {std::pair<std::int64_t, std::int64_t>{517, 4096}, {9000, 264}, {301, 1032}}) {
      auto w = WeightPair::random(DType::BF16, m, k, 1.0f / std::sqrt(float(k)));
      Pair x = Pair::random(n, k, 8), out = Pair::make(n, m, 12);
      out.poison_gpu();
      backends().ref.matmul(x.cpu, w->cpu, nullptr, out.cpu);
      backends().gpu.matmul(x.gpu, w->gpu, nullptr, out.gpu);
      EXPECT_LE(out.error(), keeps_f32_activations(DType::BF16, n, k) ? 1e-5 : tolerance(DType::BF16))
          << "n " << n << " m " << m << " k " << k;
    }
  }
}

// Half-precision GEMMs keep cuBLASLt's algorithm per class of row counts (gemm_plans.h): the
// counts of one class pay one heuristic query between them, and each result still matches the
// reference (the algorithm chosen for the class's largest count computes the smaller ones).
TEST(CudaOps, GemmRowClassesShareOneAlgorithm) {
  AKV_SKIP_WITHOUT_CUDA();
  using cuda::GemmPlans;
  EXPECT_EQ(GemmPlans::class_rows(17), 17);
  EXPECT_EQ(GemmPlans::class_rows(64), 64);
  EXPECT_EQ(GemmPlans::class_rows(65), 80);
  EXPECT_EQ(GemmPlans::class_rows(449), 512);
  EXPECT_EQ(GemmPlans::class_rows(512), 512);
  EXPECT_EQ(GemmPlans::class_rows(513), 640);
  EXPECT_EQ(GemmPlans::class_rows(641), 768);
  EXPECT_EQ(GemmPlans::class_rows(16425), 20480);
  for (DType t : {DType::BF16, DType::F16}) {
    const std::int64_t m = 389, k = 1032;  // odd rows; 2,064-byte rows: 16-byte alignment
    auto w = WeightPair::random(t, m, k, 1.0f / std::sqrt(float(k)));
    auto run = [&](std::int64_t n) {
      Pair x = Pair::random(n, k, 8), out = Pair::make(n, m, 4);
      out.poison_gpu();
      backends().ref.matmul(x.cpu, w->cpu, nullptr, out.cpu);
      backends().gpu.matmul(x.gpu, w->gpu, nullptr, out.gpu);
      EXPECT_LE(out.error(), tolerance(t)) << dtype_name(t) << " n " << n;
    };
    const std::int64_t before = backends().gpu.gemm_heuristic_queries();
    for (std::int64_t n : {449, 500, 512, 461}) run(n);
    EXPECT_EQ(backends().gpu.gemm_heuristic_queries() - before, 1) << dtype_name(t) << ": one query for 449..512";
    run(513);
    EXPECT_EQ(backends().gpu.gemm_heuristic_queries() - before, 2) << dtype_name(t) << ": 513 starts a class";
  }
}

// warm_up makes every class's choice ahead (one backend with one bf16 weight): the matmuls of
// any row count up to the warmed one then query nothing, and still match the reference.
TEST(CudaOps, WarmUpChoosesEveryGemmClass) {
  AKV_SKIP_WITHOUT_CUDA();
  auto w = WeightPair::random(DType::BF16, 256, 512, 1.0f / std::sqrt(512.0f));
  CudaBackend be;
  const WeightRef wg = be.upload_weight(w->info);
  be.warm_up(700);
  const std::int64_t warmed = be.gemm_heuristic_queries();
  EXPECT_GT(warmed, 40) << "classes 9..64 one by one, then four an octave, two output types";
  for (std::int64_t n : {9, 40, 64, 65, 300, 531, 700}) {
    Pair x = Pair::random(n, 512), out = Pair::make(n, 256);
    auto xg = be.alloc(DType::F32, n, 512), og = be.alloc(DType::F32, n, 256);
    be.upload(x.get_cpu(), xg->tensor());
    be.matmul(xg->tensor(), wg, nullptr, og->tensor());
    backends().ref.matmul(x.cpu, w->cpu, nullptr, out.cpu);
    std::vector<float> got(static_cast<std::size_t>(n * 256));
    be.download(og->tensor(), got);
    EXPECT_LE(rel_error(got, out.get_cpu()), tolerance(DType::BF16)) << "n " << n;
  }
  EXPECT_EQ(be.gemm_heuristic_queries(), warmed) << "a served step met a class the warm-up did not choose";
}

TEST(CudaOps, AddRmsNorm) {
  AKV_SKIP_WITHOUT_CUDA();
  for (DType t : kFloatTypes) {
    for (std::int64_t cols : {64, 1000, 4096}) {
      for (std::int64_t rows : {1, 6}) {
        auto w = WeightPair::random(t, 1, cols, 1.0f, true);
        // x 16-byte aligned (vector kernel) for 6 rows, not for 1 row (scalar kernel).
        Pair acc = Pair::random(rows, cols, 8), x = Pair::random(rows, cols, rows == 1 ? 4 : 8);
        Pair out = Pair::make(rows, cols);
        out.poison_gpu();
        backends().ref.add_rms_norm(acc.cpu, x.cpu, w->cpu, 1e-5f, 0.0f, out.cpu);
        backends().gpu.add_rms_norm(acc.gpu, x.gpu, w->gpu, 1e-5f, 0.0f, out.gpu);
        EXPECT_LE(out.error(), 1e-5) << dtype_name(t) << " cols " << cols;
        EXPECT_LE(acc.error(), 1e-6) << dtype_name(t) << " cols " << cols << " (sum)";
      }
    }
  }
}

TEST(CudaOps, AddGluSoftcapGather) {
  AKV_SKIP_WITHOUT_CUDA();
  Backends& b = backends();
  Pair acc = Pair::random(9, 300, 4), x = Pair::random(9, 300, 6);
  b.ref.add(acc.cpu, x.cpu);
  b.gpu.add(acc.gpu, x.gpu);
  EXPECT_LE(acc.error(), 1e-6);

  for (GluActivation act : {GluActivation::Silu, GluActivation::GeluTanh}) {
    for (std::int64_t c : {200, 203}) {  // 16-byte vector path, scalar path
      Pair gu = Pair::random(6, 2 * c, 0, 3.0f), out = Pair::make(6, c);
      out.poison_gpu();
      b.ref.glu(gu.cpu.cols_slice(0, c), gu.cpu.cols_slice(c, c), act, out.cpu);
      b.gpu.glu(gu.gpu.cols_slice(0, c), gu.gpu.cols_slice(c, c), act, out.gpu);
      EXPECT_LE(out.error(), 1e-5) << "cols " << c;
    }
  }

  Pair s = Pair::random(4, 500, 0, 40.0f);
  b.ref.softcap(s.cpu, 30.0f);
  b.gpu.softcap(s.gpu, 30.0f);
  EXPECT_LE(s.error(), 1e-6);

  Pair src = Pair::random(20, 64, 8), dst = Pair::make(5, 64);
  dst.poison_gpu();
  const std::vector<std::int32_t> rows = {19, 0, 7, 7, 3};
  b.ref.gather_rows(src.cpu, rows, dst.cpu);
  b.gpu.gather_rows(src.gpu, rows, dst.gpu);
  EXPECT_LE(dst.error(), 0.0);
}

// The gated MLP as one op: out = down(act(gate(x)) * up(x)), gate and up fused in one weight or
// apart. Scratch (gate_up, act) and out are poisoned on the GPU first; `pad` > 0 makes the
// scratch strided column slices (the CUDA half path then uses its own scratch), and x and out
// are strided for odd n.
double gated_mlp_error(DType t, bool fused, GluActivation act, std::int64_t n, std::int64_t inter,
                       std::int64_t pad = 0) {
  const std::int64_t k = 256, hidden = 200;
  Backends& b = backends();
  const float in_scale = 1.0f / std::sqrt(float(k)), down_scale = 1.0f / std::sqrt(float(inter));
  std::unique_ptr<WeightPair> gate_up, gate, up;
  if (fused) {
    gate_up = WeightPair::random(t, 2 * inter, k, in_scale);
  } else {
    gate = WeightPair::random(t, inter, k, in_scale);
    up = WeightPair::random(t, inter, k, in_scale);
  }
  auto down = WeightPair::random(t, hidden, inter, down_scale);
  auto weights = [&](auto side) {
    GatedMlpWeights w;
    if (fused) {
      w.gate_up = side(*gate_up);
    } else {
      w.gate = side(*gate);
      w.up = side(*up);
    }
    w.down = side(*down);
    return w;
  };
  const GatedMlpWeights w_cpu = weights([](const WeightPair& p) { return p.cpu; });
  const GatedMlpWeights w_gpu = weights([](const WeightPair& p) { return p.gpu; });
  Pair x = Pair::random(n, k, (n % 2) * 8), out = Pair::make(n, hidden, (n % 2) * 4);
  Pair gu = Pair::make(n, 2 * inter, pad), a = Pair::make(n, inter, pad);
  out.poison_gpu();
  gu.poison_gpu();
  a.poison_gpu();
  b.ref.gated_mlp(x.cpu, w_cpu, act, gu.cpu, a.cpu, out.cpu);
  b.gpu.gated_mlp(x.gpu, w_gpu, act, gu.gpu, a.gpu, out.gpu);
  return out.error();
}

// BF16 weights, fused and apart: up to 8 rows the f32 GEMV / skinny GEMM composition, above
// that cuBLAS with bf16 intermediates; inter 344 takes the vectorised half GLU, 203 the scalar one.
TEST(CudaOps, GatedMlpBf16) {
  AKV_SKIP_WITHOUT_CUDA();
  for (bool fused : {true, false}) {
    for (GluActivation act : {GluActivation::Silu, GluActivation::GeluTanh}) {
      for (std::int64_t n : {1, 5, 8, 9, 64, 300}) {
        for (std::int64_t inter : {344, 203}) {
          const double tol = keeps_f32_activations(DType::BF16, n, 256) ? 1e-5 : tolerance(DType::BF16);
          EXPECT_LE(gated_mlp_error(DType::BF16, fused, act, n, inter), tol)
              << (fused ? "fused" : "apart") << " gelu " << (act == GluActivation::GeluTanh) << " n " << n
              << " inter " << inter;
        }
      }
    }
  }
}

// F16 weights (f16 intermediates), F32 weights (the unfused composition on SGEMM), and BF16 with
// strided scratch (the half intermediates in the backend's own scratch).
TEST(CudaOps, GatedMlpF16F32AndStridedScratch) {
  AKV_SKIP_WITHOUT_CUDA();
  for (std::int64_t n : {64, 300}) {
    EXPECT_LE(gated_mlp_error(DType::F16, false, GluActivation::Silu, n, 344), tolerance(DType::F16)) << "f16 n " << n;
    EXPECT_LE(gated_mlp_error(DType::F32, true, GluActivation::GeluTanh, n, 344), 1e-5) << "f32 n " << n;
    for (bool fused : {true, false})
      EXPECT_LE(gated_mlp_error(DType::BF16, fused, GluActivation::Silu, n, 344, 8), tolerance(DType::BF16))
          << "strided scratch, " << (fused ? "fused" : "apart") << " n " << n;
  }
}

// The fused op inside recorded decode steps (9-64 rows take cuBLAS there): the first step of a
// batch size is captured, the next two replay it on new inputs; contiguous and strided scratch
// (the graph's own scratch buffers).
TEST(CudaOps, GatedMlpRecordedStep) {
  AKV_SKIP_WITHOUT_CUDA();
  Backends& b = backends();
  b.gpu.set_step_graphs(true);
  for (const auto& [n, pad] : {std::pair<std::int32_t, std::int64_t>{16, 0}, {33, 8}}) {
    const std::int64_t k = 256, inter = 344, hidden = 200;
    auto gate = WeightPair::random(DType::BF16, inter, k, 1.0f / std::sqrt(float(k)));
    auto up = WeightPair::random(DType::BF16, inter, k, 1.0f / std::sqrt(float(k)));
    auto down = WeightPair::random(DType::BF16, hidden, inter, 1.0f / std::sqrt(float(inter)));
    const GatedMlpWeights w_cpu{.gate_up = {}, .gate = gate->cpu, .up = up->cpu, .down = down->cpu};
    const GatedMlpWeights w_gpu{.gate_up = {}, .gate = gate->gpu, .up = up->gpu, .down = down->gpu};
    Pair x = Pair::make(n, k), out = Pair::make(n, hidden);
    Pair gu = Pair::make(n, 2 * inter, pad), a = Pair::make(n, inter, pad);
    const DecodeBatch d(b.gpu, n);

    const CudaBackend::StepStats before = b.gpu.step_stats();
    for (int step = 0; step < 3; ++step) {
      x.set(random_floats(static_cast<std::size_t>(n * k)));
      out.poison_gpu();
      std::vector<float> got(static_cast<std::size_t>(n * hidden));
      b.gpu.begin_step(d.batch, d.kv, &d.layout);
      b.gpu.gated_mlp(x.gpu, w_gpu, GluActivation::Silu, gu.gpu, a.gpu, out.gpu);
      b.gpu.download(out.gpu, got);
      b.gpu.end_step();
      b.ref.gated_mlp(x.cpu, w_cpu, GluActivation::Silu, gu.cpu, a.cpu, out.cpu);
      EXPECT_LE(note_error(rel_error(got, out.get_cpu())), tolerance(DType::BF16)) << "n " << n << " step " << step;
    }
    const CudaBackend::StepStats after = b.gpu.step_stats();
    EXPECT_EQ(after.captured - before.captured, 1) << "n " << n;
    EXPECT_EQ(after.replayed - before.replayed, 2) << "n " << n;
  }
}

// Greedy ids on the device (sample_rows at temperature 0) against the reference (backend.h's
// argmax_row rule): random rows of few distinct values (many ties for the maximum), -inf and NaN
// sprinkled in, NaN at id 0, all NaN, all -inf; a vocabulary row as wide as Llama 3's and narrow
// ones, strided views.
TEST(CudaOps, ArgmaxRows) {
  AKV_SKIP_WITHOUT_CUDA();
  Backends& b = backends();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (std::int64_t cols : {1, 31, 1000, 4099, 128256}) {
    const std::int64_t rows = 40;
    std::vector<float> v(static_cast<std::size_t>(rows * cols));
    std::uniform_int_distribution<int> level(-8, 8), col(0, static_cast<int>(cols) - 1);
    for (float& x : v) x = static_cast<float>(level(rng())) * 0.25f;
    for (std::int64_t r = 0; r < rows; ++r) {
      float* row = v.data() + r * cols;
      for (int k = 0; k < 20; ++k) row[col(rng())] = k % 2 ? nan : -inf;
      if (r == 1) row[0] = nan;
      if (r == 2) std::fill(row, row + cols, nan);
      if (r == 3) std::fill(row, row + cols, -inf);
      if (r == 4) row[cols - 1] = inf;
      if (r == 5) std::fill(row, row + cols, 1.5f);
    }
    Pair p = Pair::make(rows, cols, 6);
    p.set(v);
    std::vector<std::int32_t> want(static_cast<std::size_t>(rows)), got(static_cast<std::size_t>(rows), -7);
    const std::vector<float> greedy(static_cast<std::size_t>(rows), 0.0f);  // temperature 0: argmax_row
    const std::vector<double> u(static_cast<std::size_t>(rows), 0.5);
    b.ref.sample_rows(p.cpu, greedy, u, want);
    b.gpu.sample_rows(p.gpu, greedy, u, got);
    EXPECT_EQ(got, want) << "cols " << cols;
    for (std::int64_t r = 0; r < rows; ++r)
      EXPECT_EQ(want[r], argmax_row({v.data() + r * cols, static_cast<std::size_t>(cols)})) << "row " << r;
  }
}

// Whether `got`, a GPU draw from `row` that differs from the host's, is one the host could give
// were its sums associated differently: target = u * total lies within 1e-9 of total of the
// weight interval of `got` (an id of nonzero weight), or of the end of the row when `got` is the
// last id (draw_row's sliver rule). Weights and sums as draw_row computes them.
bool draw_within_rounding(std::span<const float> row, float temperature, double u, std::int32_t got) {
  const float inv_t = 1.0f / temperature;
  float max = row[0] * inv_t;
  for (float l : row) max = std::max(max, l * inv_t);
  std::vector<double> w(row.size());
  double total = 0.0;
  for (std::size_t i = 0; i < row.size(); ++i) total += w[i] = std::exp(static_cast<double>(row[i] * inv_t) - max);
  if (!std::isfinite(total) || got < 0 || got >= static_cast<std::int32_t>(row.size())) return false;
  const double target = u * total, tol = 1e-9 * total;
  double before = 0.0;
  for (std::int32_t i = 0; i < got; ++i) before += w[i];
  if (got == static_cast<std::int32_t>(row.size()) - 1 && target >= total - tol) return true;
  return w[got] > 0.0 && target >= before - tol && target < before + w[got] + tol;
}

// Logits rows on the device for sample_rows: normal logits at a few scales, -inf sprinkled in,
// rows with one finite logit, a -inf tail, NaN, +inf, all -inf; strided views.
std::vector<float> sample_test_rows(std::int64_t rows, std::int64_t cols) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> v;
  std::uniform_int_distribution<std::int64_t> col(0, cols - 1);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float scale = r % 3 == 0 ? 1.0f : r % 3 == 1 ? 3.0f : 10.0f;
    const std::vector<float> row = random_floats(static_cast<std::size_t>(cols), scale);
    v.insert(v.end(), row.begin(), row.end());
    float* x = v.data() + r * cols;
    if (r % 4 == 1)
      for (int k = 0; k < 20; ++k) x[col(rng())] = -inf;
    if (r == 5) {
      std::fill(x, x + cols, -inf);
      x[col(rng())] = 2.0f;
    }
    if (r == 6) std::fill(x + cols / 2, x + cols, -inf);
    if (r == 9 || r == 12) x[col(rng())] = nan;
    if (r == 10) x[col(rng())] = inf;
    if (r == 13) std::fill(x, x + cols, -inf);
  }
  return v;
}

// The uniform of row r: 0, the largest uniform, 1 - 1e-7, else random.
double sample_test_uniform(std::int64_t r, std::mt19937_64& g) {
  if (r % 8 == 2) return 0.0;
  if (r % 8 == 3 || r == 6) return 1.0 - 0x1.0p-53;
  if (r % 8 == 4) return 1.0 - 1e-7;
  return std::uniform_real_distribution<double>(0.0, 1.0)(g);
}

// Compares GPU ids with the host's rules row by row; counts the draws that differ within
// rounding of a boundary (allowed) in *near.
void expect_sampled(const std::vector<float>& v, std::int64_t cols, const std::vector<float>& temperature,
                    const std::vector<double>& u, const std::vector<std::int32_t>& got, int* near,
                    const std::string& what) {
  for (std::size_t r = 0; r < got.size(); ++r) {
    const std::span<const float> row{v.data() + r * cols, static_cast<std::size_t>(cols)};
    const bool greedy = temperature[r] <= 0.0f;
    const std::int32_t want = greedy ? argmax_row(row) : draw_row(row, temperature[r], u[r]);
    if (got[r] == want) continue;
    if (!greedy && draw_within_rounding(row, temperature[r], u[r], got[r])) {
      ++*near;
      std::printf("sample_rows %s row %zu: GPU %d, host %d (t %g, u %.17g), within rounding of a boundary\n",
                  what.c_str(), r, got[r], want, temperature[r], u[r]);
      continue;
    }
    ADD_FAILURE() << what << " row " << r << ": GPU " << got[r] << ", host " << want << " (t " << temperature[r]
                  << ", u " << u[r] << ")";
  }
}

// Greedy picks and plain temperature draws on the device (sample_rows) against argmax_row and
// draw_row on the host, for every vocabulary size the argmax test uses; u = 0 and u near 1
// included. A draw may differ only where its target lies within rounding of a boundary.
TEST(CudaOps, SampleRows) {
  AKV_SKIP_WITHOUT_CUDA();
  Backends& b = backends();
  std::mt19937_64 g(20240611);
  const float temperatures[] = {0.0f, 0.3f, 1.0f, 1.7f};
  int near = 0, draws = 0;
  for (std::int64_t cols : {1, 31, 1000, 4099, 128256}) {
    const std::int64_t rows = 48;
    const std::vector<float> v = sample_test_rows(rows, cols);
    std::vector<float> temperature;
    std::vector<double> u;
    for (std::int64_t r = 0; r < rows; ++r) {
      temperature.push_back(temperatures[(r / 2) % 4]);
      u.push_back(sample_test_uniform(r, g));
      draws += temperature.back() > 0.0f;
    }
    Pair p = Pair::make(rows, cols, 6);
    p.set(v);
    std::vector<std::int32_t> want(static_cast<std::size_t>(rows)), got(static_cast<std::size_t>(rows), -7);
    b.ref.sample_rows(p.cpu, temperature, u, want);
    b.gpu.sample_rows(p.gpu, temperature, u, got);
    expect_sampled(v, cols, temperature, u, got, &near, "cols " + std::to_string(cols));
    for (std::int64_t r = 0; r < rows; ++r) {  // the reference backend is the host rule itself
      const std::span<const float> row{v.data() + r * cols, static_cast<std::size_t>(cols)};
      EXPECT_EQ(want[r], temperature[r] <= 0.0f ? argmax_row(row) : draw_row(row, temperature[r], u[r]));
    }
  }
  std::printf("sample_rows: %d of %d draws differ from the host, each within rounding of a boundary\n", near, draws);
}

// sample_rows as the last op of a recorded decode step: the first step of a batch size is
// captured, the next two replay it with new logits, temperatures and uniforms (the host arrays
// travel through the graph's arena).
TEST(CudaOps, SampleRowsRecordedStep) {
  AKV_SKIP_WITHOUT_CUDA();
  Backends& b = backends();
  b.gpu.set_step_graphs(true);
  std::mt19937_64 g(7);
  int near = 0;
  const std::int32_t n = 16;
  const std::int64_t cols = 32000;
  const KvLayout layout{.n_layers = 1, .n_blocks = n, .block_size = 16, .n_kv_heads = 1, .head_dim = 8,
                        .dtype = DType::F32};
  KvStorage kv = b.gpu.alloc_kv(layout);
  std::vector<std::int32_t> tables(n), tokens(n), logit_rows(n);
  std::iota(tables.begin(), tables.end(), 0);
  std::iota(logit_rows.begin(), logit_rows.end(), 0);
  std::vector<SequenceChunk> chunks;
  for (std::int32_t i = 0; i < n; ++i)
    chunks.push_back({.first_row = i, .n_tokens = 1, .start_pos = 3, .block_table = {&tables[i], 1}});
  const std::vector<std::int32_t> pos = positions_for(chunks);
  const ForwardBatch batch{.tokens = tokens, .positions = pos, .sequences = chunks, .logit_rows = logit_rows};
  Pair p = Pair::make(n, cols, 4);
  std::vector<float> temperature(n);
  std::vector<double> u(n);
  const CudaBackend::StepStats before = b.gpu.step_stats();
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> v = sample_test_rows(n, cols);
    p.set(v);
    for (std::int32_t r = 0; r < n; ++r) {
      temperature[r] = (r + step) % 3 == 0 ? 0.0f : 0.5f + 0.25f * static_cast<float>(step);
      u[r] = sample_test_uniform(r + step, g);
    }
    std::vector<std::int32_t> got(n, -7);
    b.gpu.begin_step(batch, kv, &layout);
    b.gpu.sample_rows(p.gpu, temperature, u, got);
    b.gpu.end_step();
    expect_sampled(v, cols, temperature, u, got, &near, "step " + std::to_string(step));
  }
  const CudaBackend::StepStats after = b.gpu.step_stats();
  EXPECT_EQ(after.captured - before.captured, 1);
  EXPECT_EQ(after.replayed - before.replayed, 2);
}

TEST(CudaOps, RopeFullAndPartial) {
  AKV_SKIP_WITHOUT_CUDA();
  for (std::int64_t rotary : {64, 32}) {
    std::vector<double> inv_freq(rotary / 2);
    for (std::size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(500000.0, -2.0 * double(i) / double(rotary));
    const RopeParams rope{inv_freq, rotary, 1.3};
    std::vector<std::int32_t> pos(11);
    for (auto& p : pos) p = static_cast<std::int32_t>(rng()() % 40000);
    Pair x = Pair::random(11, 6 * 64, 2 * 64);
    backends().ref.rope(x.cpu, 64, rope, pos);
    backends().gpu.rope(x.gpu, 64, rope, pos);
    EXPECT_LE(x.error(), 1e-6) << "rotary " << rotary;
  }
}

TEST(CudaOps, AttentionPrefillDecodeMixed) {
  AKV_SKIP_WITHOUT_CUDA();
  // A long prefill chunk, a continued chunk, two decode tokens (one with a long context).
  const std::vector<SeqSpec> mixed = {{0, 70}, {30, 20}, {100, 1}, {700, 1}};
  const std::vector<SeqSpec> decode = {{900, 1}, {33, 1}, {2000, 1}};
  struct Heads {
    std::int64_t h, kv, d;
  };
  for (DType kvt : {DType::F32, DType::BF16}) {
    for (Heads hd : {Heads{8, 2, 64}, Heads{4, 4, 128}, Heads{16, 2, 128}, Heads{8, 4, 8}, Heads{4, 2, 16}}) {
      for (std::int64_t window : {0, 7, 300}) {
        for (double cap : {0.0, 20.0}) {
          // bf16 KV prefill of head_dim 64/128 runs on the tensor cores (P and q in bf16).
          const bool tc = kvt == DType::BF16 && (hd.d == 64 || hd.d == 128);
          const double tol = tc ? 1e-2 : 1e-5;
          EXPECT_LE(attention_error(kvt, hd.h, hd.kv, hd.d, window, cap, mixed), tol)
              << dtype_name(kvt) << " heads " << hd.h << "/" << hd.kv << " d " << hd.d << " window " << window
              << " cap " << cap << " mixed";
          EXPECT_LE(attention_error(kvt, hd.h, hd.kv, hd.d, window, cap, decode), 1e-5)
              << dtype_name(kvt) << " heads " << hd.h << "/" << hd.kv << " d " << hd.d << " window " << window
              << " cap " << cap << " decode";
        }
      }
    }
  }
}

// Tensor-core prefill tiles: chunks not a multiple of the tile, continuing a cached prefix
// (start > 0), windows crossing tile edges, GQA groups of 4 and 2 (four or two heads per block on
// wgmma, two on mma.sync), 1 and 3 (one head per block, mma.sync).
TEST(CudaOps, AttentionPrefillTiles) {
  AKV_SKIP_WITHOUT_CUDA();
  const std::vector<SeqSpec> chunks = {{0, 300}, {200, 130}, {5, 129}, {64, 64}, {1000, 77}};
  struct Heads {
    std::int64_t h, kv, d;
  };
  for (Heads hd : {Heads{16, 4, 128}, Heads{8, 2, 64}, Heads{8, 4, 128}, Heads{4, 2, 64}, Heads{4, 4, 128},
                   Heads{6, 2, 64}}) {
    for (std::int64_t window : {0, 63, 64, 129}) {
      for (double cap : {0.0, 30.0}) {
        if (cap > 0.0 && window != 64) continue;
        EXPECT_LE(attention_error(DType::BF16, hd.h, hd.kv, hd.d, window, cap, chunks), 1e-2)
            << "heads " << hd.h << "/" << hd.kv << " d " << hd.d << " window " << window << " cap " << cap;
      }
    }
  }
}

TEST(CudaOps, StoreAndCopyKvBlock) {
  AKV_SKIP_WITHOUT_CUDA();
  Backends& b = backends();
  for (DType kvt : {DType::F32, DType::BF16}) {
    const KvLayout layout{.n_layers = 3, .n_blocks = 6, .block_size = 4, .n_kv_heads = 2, .head_dim = 8, .dtype = kvt};
    KvStorage kc = b.ref.alloc_kv(layout), kg = b.gpu.alloc_kv(layout);
    const std::vector<std::int32_t> table = {5, 2, 0};
    const SequenceChunk chunk{.first_row = 0, .n_tokens = 11, .start_pos = 0, .block_table = table};
    const std::vector<std::int32_t> pos = positions_for({&chunk, 1}), tokens(11);
    const ForwardBatch batch{.tokens = tokens, .positions = pos, .sequences = {&chunk, 1}, .logit_rows = {}};
    for (std::int64_t l = 0; l < 3; ++l) {
      Pair k = Pair::random(11, 16), v = Pair::random(11, 16);
      b.ref.store_kv(kc, l, k.cpu, v.cpu, batch);
      b.gpu.store_kv(kg, l, k.gpu, v.gpu, batch);
    }
    b.ref.copy_kv_block(kc, 2, 4);
    b.gpu.copy_kv_block(kg, 2, 4);
    // Compare the whole cache through f32 views of its bytes converted on the host.
    for (std::int64_t l = 0; l < 3; ++l) {
      for (bool is_k : {true, false}) {
        const TensorRef c = is_k ? kc.k[l] : kc.v[l], g = is_k ? kg.k[l] : kg.v[l];
        const std::size_t bytes = static_cast<std::size_t>(c.rows * c.cols) * dtype_size(kvt);
        std::vector<std::uint8_t> gb(bytes);
        b.gpu.synchronize();
        ASSERT_EQ(cudaMemcpy(gb.data(), g.data, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_EQ(std::memcmp(gb.data(), c.data, bytes), 0) << dtype_name(kvt) << " layer " << l;
      }
    }
  }
}

// The tier copies (device <-> host bytes of one block): a block read from the GPU equals the same
// block read from the reference backend, and bytes written into a GPU block read back unchanged.
TEST(CudaOps, ReadAndWriteKvBlock) {
  AKV_SKIP_WITHOUT_CUDA();
  Backends& b = backends();
  for (DType kvt : {DType::F32, DType::BF16}) {
    const KvLayout layout{.n_layers = 2, .n_blocks = 4, .block_size = 4, .n_kv_heads = 2, .head_dim = 8, .dtype = kvt};
    KvStorage kc = b.ref.alloc_kv(layout), kg = b.gpu.alloc_kv(layout);
    const std::vector<std::int32_t> table = {3, 1};
    const SequenceChunk chunk{.first_row = 0, .n_tokens = 7, .start_pos = 0, .block_table = table};
    const std::vector<std::int32_t> pos = positions_for({&chunk, 1}), tokens(7);
    const ForwardBatch batch{.tokens = tokens, .positions = pos, .sequences = {&chunk, 1}, .logit_rows = {}};
    for (std::int64_t l = 0; l < 2; ++l) {
      Pair k = Pair::random(7, 16), v = Pair::random(7, 16);
      b.ref.store_kv(kc, l, k.cpu, v.cpu, batch);
      b.gpu.store_kv(kg, l, k.gpu, v.gpu, batch);
    }
    const auto n = static_cast<std::size_t>(layout.block_bytes());
    std::vector<std::byte> from_ref(n), from_gpu(n), back(n);
    for (std::int32_t block : {3, 1}) {
      b.ref.read_kv_block(kc, block, from_ref);
      b.gpu.read_kv_block(kg, block, from_gpu);
      EXPECT_EQ(std::memcmp(from_ref.data(), from_gpu.data(), n), 0) << dtype_name(kvt) << " block " << block;
    }
    // Round trip through an unused block.
    for (std::size_t i = 0; i < n; ++i) from_ref[i] = static_cast<std::byte>(rng()() & 0x3f);
    b.gpu.write_kv_block(kg, 0, from_ref);
    b.gpu.read_kv_block(kg, 0, back);
    EXPECT_EQ(std::memcmp(from_ref.data(), back.data(), n), 0) << dtype_name(kvt);
  }
}

// Queues about 10 ms of f32 GEMMs on the GPU, so copies and ops issued next wait behind them
// (a missing wait between the copy stream and the compute stream then shows).
void keep_gpu_busy() {
  Backends& b = backends();
  static const auto x = b.gpu.alloc(DType::F32, 2048, 4096), w = b.gpu.alloc(DType::F32, 4096, 4096),
                    out = b.gpu.alloc(DType::F32, 2048, 4096);
  const WeightRef weight{w->tensor().data, DType::F32, 4096, 4096};
  for (int i = 0; i < 8; ++i) b.gpu.matmul(x->tensor(), weight, nullptr, out->tensor());
}

// Random bytes (a raw round trip) or random values of the KV dtype (bytes attention reads).
void fill_random_bytes(std::vector<std::byte>& host) {
  for (std::byte& x : host) x = static_cast<std::byte>(rng()());
}
void fill_random_values(std::vector<std::byte>& host, DType t) {
  const std::vector<float> v = random_floats(host.size() / dtype_size(t));
  for (std::size_t i = 0; i < v.size(); ++i) store_f32(host.data(), t, static_cast<std::int64_t>(i), v[i]);
}

// write_kv_block returns before its copy lands: more blocks than the staging ring has slots,
// back to back behind queued GPU work (slots come round again while in flight), from one host
// buffer refilled right after each call; then a block larger than a slot (the ring drains and
// grows) while those may still be queued. Every block reads back as written.
TEST(CudaOps, WriteKvBlocksPastTheStagingRing) {
  AKV_SKIP_WITHOUT_CUDA();
  Backends& b = backends();
  for (DType kvt : {DType::F32, DType::BF16}) {
    const KvLayout layout{.n_layers = 3, .n_blocks = 150, .block_size = 16, .n_kv_heads = 2, .head_dim = 32,
                          .dtype = kvt};
    KvStorage kv = b.gpu.alloc_kv(layout);
    std::vector<std::byte> host(static_cast<std::size_t>(layout.block_bytes()));
    std::vector<std::vector<std::byte>> written;
    keep_gpu_busy();
    for (std::int32_t block = 0; block < layout.n_blocks; ++block) {
      fill_random_bytes(host);
      written.push_back(host);
      b.gpu.write_kv_block(kv, block, host);
    }
    const CudaBackend::KvStaging ring = b.gpu.kv_staging();
    ASSERT_GE(ring.slots, 2u);
    ASSERT_GT(static_cast<std::size_t>(layout.n_blocks), ring.slots) << "the writes must wrap the ring";

    // 2 layers x K, V x one f32 row of 64: 1 KiB a token, so this block is larger than a slot.
    const auto big_tokens = static_cast<std::int64_t>(ring.slot_bytes / 1024 + 1);
    const KvLayout big{.n_layers = 2, .n_blocks = 2, .block_size = big_tokens, .n_kv_heads = 1, .head_dim = 64,
                       .dtype = DType::F32};
    KvStorage kv_big = b.gpu.alloc_kv(big);
    std::vector<std::byte> big_host(static_cast<std::size_t>(big.block_bytes())), big_back(big_host.size());
    ASSERT_GT(big_host.size(), ring.slot_bytes);
    keep_gpu_busy();
    for (std::int32_t block = 0; block < 20; ++block) {
      fill_random_bytes(host);
      written[block] = host;
      b.gpu.write_kv_block(kv, block, host);
    }
    fill_random_bytes(big_host);
    const std::vector<std::byte> big_written = big_host;
    b.gpu.write_kv_block(kv_big, 1, big_host);
    fill_random_bytes(big_host);
    EXPECT_GE(b.gpu.kv_staging().slot_bytes, big_host.size());
    EXPECT_GE(b.gpu.kv_staging().slots, 2u);

    std::vector<std::byte> back(host.size());
    for (std::int32_t block = 0; block < layout.n_blocks; ++block) {
      b.gpu.read_kv_block(kv, block, back);
      EXPECT_EQ(std::memcmp(back.data(), written[block].data(), back.size()), 0)
          << dtype_name(kvt) << " block " << block;
    }
    b.gpu.read_kv_block(kv_big, 1, big_back);
    EXPECT_EQ(std::memcmp(big_back.data(), big_written.data(), big_back.size()), 0) << dtype_name(kvt) << " big block";
  }
}

// Attention right after write_kv_block (no wait in between, the GPU busy with earlier work) sees
// the new bytes, as the reference does; on odd rounds the block is written twice in a row (the
// second write wins). The host buffer is refilled after each write.
TEST(CudaOps, WriteKvBlockThenAttention) {
  AKV_SKIP_WITHOUT_CUDA();
  Backends& b = backends();
  for (DType kvt : {DType::F32, DType::BF16}) {
    const KvLayout layout{.n_layers = 2, .n_blocks = 6, .block_size = 16, .n_kv_heads = 2, .head_dim = 16,
                          .dtype = kvt};
    KvStorage kc = b.ref.alloc_kv(layout), kg = b.gpu.alloc_kv(layout);
    std::vector<std::byte> host(static_cast<std::size_t>(layout.block_bytes()));
    auto write_both = [&](std::int32_t block) {
      fill_random_values(host, kvt);
      b.ref.write_kv_block(kc, block, host);
      b.gpu.write_kv_block(kg, block, host);
      fill_random_bytes(host);
    };
    for (std::int32_t block = 0; block < layout.n_blocks; ++block) write_both(block);

    const std::vector<std::int32_t> table = {4, 1, 3};
    const SequenceChunk chunk{.first_row = 0, .n_tokens = 1, .start_pos = 40, .block_table = table};
    const std::vector<std::int32_t> pos = positions_for({&chunk, 1}), tokens(1);
    const ForwardBatch batch{.tokens = tokens, .positions = pos, .sequences = {&chunk, 1}, .logit_rows = {}};
    const AttentionParams p{.n_heads = 4, .n_kv_heads = 2, .head_dim = 16, .scale = 0.25, .window = 0,
                            .logit_softcap = 0.0};
    Pair q = Pair::random(1, 64), out = Pair::make(1, 64);
    for (int round = 0; round < 6; ++round) {
      const std::int32_t block = table[static_cast<std::size_t>(round % 3)];
      const std::int64_t layer = round % 2;
      out.poison_gpu();
      keep_gpu_busy();
      write_both(block);
      if (round % 2 == 1) write_both(block);
      b.ref.attention(q.cpu, kc, layer, batch, p, out.cpu);
      b.gpu.attention(q.gpu, kg, layer, batch, p, out.gpu);
      EXPECT_LE(out.error(), 1e-5) << dtype_name(kvt) << " round " << round << " block " << block;
    }
  }
}

// read_kv_block right after kernels that change the block (store_kv; on odd rounds after a
// write_kv_block too), the GPU busy with earlier work: the bytes equal the reference's.
TEST(CudaOps, ReadKvBlockAfterStoreKv) {
  AKV_SKIP_WITHOUT_CUDA();
  Backends& b = backends();
  for (DType kvt : {DType::F32, DType::BF16}) {
    const KvLayout layout{.n_layers = 2, .n_blocks = 4, .block_size = 16, .n_kv_heads = 2, .head_dim = 16,
                          .dtype = kvt};
    KvStorage kc = b.ref.alloc_kv(layout), kg = b.gpu.alloc_kv(layout);
    const auto n = static_cast<std::size_t>(layout.block_bytes());
    std::vector<std::byte> host(n), from_ref(n), from_gpu(n);
    const std::vector<std::int32_t> table = {2};
    for (int round = 0; round < 6; ++round) {
      const SequenceChunk chunk{.first_row = 0, .n_tokens = 4, .start_pos = (round * 5) % 12, .block_table = table};
      const std::vector<std::int32_t> pos = positions_for({&chunk, 1}), tokens(4);
      const ForwardBatch batch{.tokens = tokens, .positions = pos, .sequences = {&chunk, 1}, .logit_rows = {}};
      Pair k = Pair::random(4, 32), v = Pair::random(4, 32);
      keep_gpu_busy();
      if (round % 2 == 1) {
        fill_random_values(host, kvt);
        b.ref.write_kv_block(kc, 2, host);
        b.gpu.write_kv_block(kg, 2, host);
      }
      for (std::int64_t l = 0; l < 2; ++l) {
        b.ref.store_kv(kc, l, k.cpu, v.cpu, batch);
        b.gpu.store_kv(kg, l, k.gpu, v.gpu, batch);
      }
      b.ref.read_kv_block(kc, 2, from_ref);
      b.gpu.read_kv_block(kg, 2, from_gpu);
      EXPECT_EQ(std::memcmp(from_ref.data(), from_gpu.data(), n), 0) << dtype_name(kvt) << " round " << round;
    }
  }
}

// start_read_kv_block captures the block as it is at the call: reads of blocks 0-3 started
// behind queued GPU work, each followed by a write_kv_block of new bytes into the same block and,
// every third read, a store_kv into blocks 4 and 5; more reads pending than the staging ring has
// slots (the writes' slots then finish them early). After finish_reads every host copy equals the
// reference's read at its start call, and the blocks hold what was written after.
TEST(CudaOps, StartedReadsKeepTheBlockAsAtTheCall) {
  AKV_SKIP_WITHOUT_CUDA();
  Backends& b = backends();
  for (DType kvt : {DType::F32, DType::BF16}) {
    const KvLayout layout{.n_layers = 2, .n_blocks = 6, .block_size = 16, .n_kv_heads = 2, .head_dim = 16,
                          .dtype = kvt};
    KvStorage kc = b.ref.alloc_kv(layout), kg = b.gpu.alloc_kv(layout);
    const auto n = static_cast<std::size_t>(layout.block_bytes());
    std::vector<std::byte> host(n);
    auto write_both = [&](std::int32_t block) {
      fill_random_values(host, kvt);
      b.ref.write_kv_block(kc, block, host);
      b.gpu.write_kv_block(kg, block, host);
    };
    for (std::int32_t block = 0; block < layout.n_blocks; ++block) write_both(block);
    const std::vector<std::int32_t> table = {4, 5};
    const SequenceChunk chunk{.first_row = 0, .n_tokens = 20, .start_pos = 0, .block_table = table};
    const std::vector<std::int32_t> pos = positions_for({&chunk, 1}), tokens(20);
    const ForwardBatch batch{.tokens = tokens, .positions = pos, .sequences = {&chunk, 1}, .logit_rows = {}};

    const std::size_t n_reads = 2 * b.gpu.kv_staging().slots + 3;
    ASSERT_GE(n_reads, 7u);
    std::vector<std::vector<std::byte>> from_gpu(n_reads, std::vector<std::byte>(n)), expected = from_gpu;
    keep_gpu_busy();
    for (std::size_t r = 0; r < n_reads; ++r) {
      const auto block = static_cast<std::int32_t>(r % 4);
      b.ref.read_kv_block(kc, block, expected[r]);
      b.gpu.start_read_kv_block(kg, block, from_gpu[r]);
      write_both(block);
      if (r % 3 == 2) {
        for (std::int64_t l = 0; l < 2; ++l) {
          Pair k = Pair::random(20, 32), v = Pair::random(20, 32);
          b.ref.store_kv(kc, l, k.cpu, v.cpu, batch);
          b.gpu.store_kv(kg, l, k.gpu, v.gpu, batch);
        }
      }
    }
    EXPECT_GT(n_reads, b.gpu.kv_staging().slots) << "more reads than slots";
    b.gpu.finish_reads();
    for (std::size_t r = 0; r < n_reads; ++r)
      EXPECT_EQ(std::memcmp(from_gpu[r].data(), expected[r].data(), n), 0) << dtype_name(kvt) << " read " << r;
    std::vector<std::byte> from_ref(n), back(n);
    for (std::int32_t block = 0; block < layout.n_blocks; ++block) {
      b.ref.read_kv_block(kc, block, from_ref);
      b.gpu.read_kv_block(kg, block, back);
      EXPECT_EQ(std::memcmp(from_ref.data(), back.data(), n), 0) << dtype_name(kvt) << " block " << block;
    }
    b.gpu.finish_reads();  // nothing pending: returns at once
  }
}

}  // namespace
}  // namespace akv::test
