// cuda_bench --moe 1: one MoE layer (CudaBackend::moe) of the Qwen3-30B-A3B shape (hidden 2048,
// 128 experts, top 8, expert width 768) in bf16 and in Q4_K_M's expert types (GGUF blocks: Q4_K
// gate/up, Q6_K down), and of the GPT-OSS-20B shape (hidden 2880, 32 experts, top 4, width 2880,
// MXFP4 with biases): batch-1 decode time per layer with the bytes of
// the chosen experts read per second against the device copy bandwidth (the decode bound), and
// a 4096-token prefill in TFLOP/s, each with the per-pair kernels (the first CUDA MoE) and the
// fast paths side by side in one run (decode: the two-launch kernels and their pipelined form;
// GGUF blocks have one decode path and one prefill path; MXFP4 decodes through the f32 kernels
// and through the int8 kernels of GGUF blocks, at 1 and 8 tokens).
// Several copies of the layer and fresh router logits per call keep the chosen experts out of
// the L2 cache, as in a forward over many layers.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/moe_kernels.h"

namespace akv::bench {
void fill_bf16(void* p, std::int64_t n, std::uint64_t seed, float center, float scale);
void fill_bytes(void* p, std::int64_t n, std::uint64_t seed, int lo, int hi);

namespace {

struct MoeShape {
  const char* name;
  std::int64_t hidden, n_experts, top_k, inter;
  bool mxfp4;  // GPT-OSS: MXFP4 experts, biases, top-k softmax, clamped SwiGLU, interleaved gate/up
  int copies;  // layers rotated through (more expert bytes than the L2 holds)
  DType gguf_gate_up = DType::F32, gguf_down = DType::F32;  // quantized: GGUF-block experts
  bool gguf() const { return dtype_is_quantized(gguf_gate_up); }
};
constexpr MoeShape kShapes[] = {
    {"Qwen3-30B-A3B layer (bf16)", 2048, 128, 8, 768, false, 4},
    {"Qwen3-30B-A3B layer (Q4_K_M experts: Q4_K gate/up, Q6_K down)", 2048, 128, 8, 768, false, 8, DType::Q4_K,
     DType::Q6_K},
    {"GPT-OSS-20B layer (MXFP4)", 2880, 32, 4, 2880, true, 8}};

// Bytes of one expert's weights (gate_up, down, their scales and biases).
double expert_bytes(const MoeShape& s) {
  const double gu = 2.0 * s.inter * s.hidden, dn = double(s.hidden) * s.inter;
  if (s.gguf())
    return 2.0 * s.inter * double(dtype_row_bytes(s.gguf_gate_up, s.hidden)) +
           double(s.hidden) * double(dtype_row_bytes(s.gguf_down, s.inter));
  if (!s.mxfp4) return 2.0 * (gu + dn);
  return (gu + dn) / 2 + (gu + dn) / 32 + 2.0 * (2 * s.inter + s.hidden);  // bf16 biases
}

MoeWeights make_layer(CudaBackend& be, const MoeShape& s, std::uint64_t seed) {
  const std::int64_t e = s.n_experts, gu_rows = e * 2 * s.inter, dn_rows = e * s.hidden;
  MoeWeights w;
  if (s.gguf()) {  // random blocks; bytes <= 0x1b keep every f16 scale finite and small
    w.format = ExpertFormat::GgufBlocks;
    w.gate_up = be.alloc_weight(s.gguf_gate_up, gu_rows, s.hidden);
    w.down = be.alloc_weight(s.gguf_down, dn_rows, s.inter);
    fill_bytes(const_cast<void*>(w.gate_up.data),
               gu_rows * static_cast<std::int64_t>(dtype_row_bytes(s.gguf_gate_up, s.hidden)), seed, 0, 0x1b);
    fill_bytes(const_cast<void*>(w.down.data), dn_rows * static_cast<std::int64_t>(dtype_row_bytes(s.gguf_down, s.inter)),
               seed + 1, 0, 0x1b);
    return w;
  }
  if (!s.mxfp4) {
    w.gate_up = be.alloc_weight(DType::BF16, gu_rows, s.hidden);
    w.down = be.alloc_weight(DType::BF16, dn_rows, s.inter);
    fill_bf16(const_cast<void*>(w.gate_up.data), gu_rows * s.hidden, seed, 0.0f, 0.03f);
    fill_bf16(const_cast<void*>(w.down.data), dn_rows * s.inter, seed + 1, 0.0f, 0.03f);
    return w;
  }
  w.format = ExpertFormat::Mxfp4;
  w.gate_up = be.alloc_weight(DType::U8, gu_rows, s.hidden / 2);
  w.gate_up_scales = be.alloc_weight(DType::U8, gu_rows, s.hidden / 32);
  w.down = be.alloc_weight(DType::U8, dn_rows, s.inter / 2);
  w.down_scales = be.alloc_weight(DType::U8, dn_rows, s.inter / 32);
  fill_bytes(const_cast<void*>(w.gate_up.data), gu_rows * s.hidden / 2, seed, 0, 255);
  fill_bytes(const_cast<void*>(w.gate_up_scales.data), gu_rows * s.hidden / 32, seed + 1, 118, 122);
  fill_bytes(const_cast<void*>(w.down.data), dn_rows * s.inter / 2, seed + 2, 0, 255);
  fill_bytes(const_cast<void*>(w.down_scales.data), dn_rows * s.inter / 32, seed + 3, 118, 122);
  w.gate_up.cols = s.hidden;  // logical widths (MoeWeights)
  w.down.cols = s.inter;
  w.gate_up_bias = be.alloc_weight(DType::BF16, e, 2 * s.inter);
  w.down_bias = be.alloc_weight(DType::BF16, e, s.hidden);
  fill_bf16(const_cast<void*>(w.gate_up_bias.data), e * 2 * s.inter, seed + 4, 0.0f, 0.5f);
  fill_bf16(const_cast<void*>(w.down_bias.data), e * s.hidden, seed + 5, 0.0f, 0.5f);
  return w;
}

MoeParams params_of(const MoeShape& s) {
  if (!s.mxfp4)
    return {.n_experts = s.n_experts, .top_k = s.top_k, .inter = s.inter, .gating = MoeGating::SoftmaxTopK,
            .norm_topk_prob = true};
  return {.n_experts = s.n_experts, .top_k = s.top_k, .inter = s.inter, .gating = MoeGating::TopKSoftmax,
          .act = ExpertActivation::ClampedSwiglu, .swiglu_limit = 7.0f, .swiglu_alpha = 1.702f,
          .interleaved_gate_up = true};
}

// Seconds per call of f(i) over `calls` calls (median of 7 timed passes after one warm-up pass),
// device events on the backend's stream; host waits inside f (the grouped path's) are included.
template <typename F>
double seconds_per_call(CudaBackend& be, int calls, F&& f) {
  cudaEvent_t a, b;
  AKV_CUDA_CHECK(cudaEventCreate(&a));
  AKV_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int rep = 0; rep < 8; ++rep) {
    AKV_CUDA_CHECK(cudaEventRecord(a, be.stream()));
    for (int i = 0; i < calls; ++i) f(i);
    AKV_CUDA_CHECK(cudaEventRecord(b, be.stream()));
    AKV_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    AKV_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (rep > 0) t.push_back(ms * 1e-3 / calls);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Seconds per call of f(i), i < calls, captured once into a CUDA graph and replayed (median of 7
// replays after one): the device time without the host's launch cost.
template <typename F>
double graph_seconds_per_call(CudaBackend& be, int calls, F&& f) {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  AKV_CUDA_CHECK(cudaStreamBeginCapture(be.stream(), cudaStreamCaptureModeRelaxed));
  for (int i = 0; i < calls; ++i) f(i);
  AKV_CUDA_CHECK(cudaStreamEndCapture(be.stream(), &g));
  AKV_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
  const double t = seconds_per_call(be, 1, [&](int) { AKV_CUDA_CHECK(cudaGraphLaunch(ge, be.stream())); });
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return t / calls;
}

// GGUF-block experts: the decode kernels at 1 and 8 tokens, the prefill (each expert dequantized to
// bf16, a GEMM per expert) at 4096, and the two paths' outputs on the same 64 tokens.
// The decode rows split for the time's parts: the routing launch alone, the expert launches alone
// (on the last routing), and the whole op replayed as a CUDA graph (no host launch cost).
template <typename Call, typename Route, typename Experts>
void bench_gguf(CudaBackend& be, const MoeShape& s, double copy_bw, Call&& call, Route&& route, Experts&& experts,
                TensorRef out, double decode_bytes, double prefill_flops) {
  using Kernels = CudaBackend::MoeKernels;
  const auto row = [&](const char* path, std::int64_t n, double t) {
    std::printf("| %s | %lld | %.1f us | %.0f | %.1f%% | - |\n", path, static_cast<long long>(n), t * 1e6,
                decode_bytes / t * 1e-9, 100.0 * decode_bytes / t / copy_bw);
  };
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{8}}) {
    be.set_moe_quant_staging(cuda::MoeQuantStaging::Windows);
    row("decode kernels, rows staged a window at a time (before)", n,
        seconds_per_call(be, 64, [&](int i) { call(n, i); }));
    be.set_moe_quant_staging(cuda::MoeQuantStaging::Runs);
    row("decode kernels (GGUF blocks, int8 activations; runs, the default)", n,
        seconds_per_call(be, 64, [&](int i) { call(n, i); }));
    try {
      row("  routing launch alone", n, seconds_per_call(be, 64, [&](int i) { route(n, i); }));
      row("  expert launches alone (last routing)", n, seconds_per_call(be, 64, [&](int i) { experts(n, i); }));
      row("  whole op as a CUDA graph (64 calls)", n, graph_seconds_per_call(be, 64, [&](int i) { call(n, i); }));
      row("  expert launches as a CUDA graph", n, graph_seconds_per_call(be, 64, [&](int i) { experts(n, i); }));
    } catch (const std::exception& e) {
      std::printf("(split timing failed: %s)\n", e.what());
    }
  }
  const std::int64_t max_n = 4096;
  const double tp = seconds_per_call(be, 4, [&](int i) { call(max_n, i); });
  std::printf("| prefill: experts dequantized to bf16, a GEMM per expert | %lld | %.2f ms | - | - | %.1f |\n",
              static_cast<long long>(max_n), tp * 1e3, prefill_flops / tp * 1e-12);
  std::printf("(decode GB/s: the chosen experts' blocks of one token, k distinct experts; at 8 tokens the\n"
              "union is larger, so the column understates the bytes read there)\n");
  const std::int64_t n = 64;  // the decode kernels in per-pair mode, the grouped prefill otherwise
  std::vector<float> decoded(static_cast<std::size_t>(n * s.hidden)), prefilled(decoded.size());
  be.set_moe_kernels(Kernels::PerPair);
  call(n, 0);
  be.download(out.rows_slice(0, n), decoded);
  be.set_moe_kernels(Kernels::Grouped);
  call(n, 0);
  be.download(out.rows_slice(0, n), prefilled);
  double num = 0, den = 0;
  for (std::size_t i = 0; i < decoded.size(); ++i) {
    num += (double(decoded[i]) - prefilled[i]) * (double(decoded[i]) - prefilled[i]);
    den += double(prefilled[i]) * prefilled[i];
  }
  std::printf("%lld tokens: decode kernels (int8) vs prefill path (bf16) output, relative L2 difference %.2e\n",
              static_cast<long long>(n), std::sqrt(num / std::max(den, 1e-300)));
}

// MXFP4 experts' decode at 1 and 8 tokens through the f32 kernels (pipelined) and the int8
// kernels (CudaBackend::set_moe_mxfp4_decode), the int8 time split as bench_gguf's, and the two
// paths' outputs on the same tokens.
template <typename Call, typename Experts>
void bench_mxfp4_decode(CudaBackend& be, double copy_bw, Call&& call, Experts&& experts,
                        TensorRef out, std::int64_t hidden, double decode_bytes) {
  using Mx = CudaBackend::MoeMxfp4Decode;
  const auto row = [&](const char* path, std::int64_t n, double t) {
    std::printf("| %s | %lld | %.1f us | %.0f | %.1f%% | - |\n", path, static_cast<long long>(n),
                t * 1e6, decode_bytes / t * 1e-9, 100.0 * decode_bytes / t / copy_bw);
  };
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{8}}) {
    be.set_moe_mxfp4_decode(Mx::F32);
    row("MXFP4 decode: f32 kernels (pipelined; before)", n,
        seconds_per_call(be, 64, [&](int i) { call(n, i); }));
    be.set_moe_mxfp4_decode(Mx::Int8);
    be.set_moe_quant_staging(cuda::MoeQuantStaging::Windows);
    row("MXFP4 decode: int8 kernels, rows staged a window at a time (before)", n,
        seconds_per_call(be, 64, [&](int i) { call(n, i); }));
    be.set_moe_quant_staging(cuda::MoeQuantStaging::Runs);
    row("MXFP4 decode: int8 kernels (runs, dp4a; the default)", n,
        seconds_per_call(be, 64, [&](int i) { call(n, i); }));
    try {
      row("  expert launches alone (last routing)", n,
          seconds_per_call(be, 64, [&](int i) { experts(n, i); }));
      row("  whole op as a CUDA graph (64 calls)", n,
          graph_seconds_per_call(be, 64, [&](int i) { call(n, i); }));
    } catch (const std::exception& e) {
      std::printf("(split timing failed: %s)\n", e.what());
    }
  }
  std::printf(
      "(decode GB/s: the chosen experts' bytes of one token, k distinct experts; at 8 tokens the\n"
      "union is larger, so the column understates the bytes read there)\n");
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{8}}) {
    std::vector<float> f32_out(static_cast<std::size_t>(n * hidden)), int8_out(f32_out.size());
    be.set_moe_mxfp4_decode(Mx::F32);
    call(n, 0);
    be.download(out.rows_slice(0, n), f32_out);
    be.set_moe_mxfp4_decode(Mx::Int8);
    call(n, 0);
    be.download(out.rows_slice(0, n), int8_out);
    double num = 0, den = 0;
    for (std::size_t i = 0; i < f32_out.size(); ++i) {
      num += (double(int8_out[i]) - f32_out[i]) * (double(int8_out[i]) - f32_out[i]);
      den += double(f32_out[i]) * f32_out[i];
    }
    std::printf("%lld tokens: MXFP4 int8 vs f32 decode output, relative L2 difference %.2e\n",
                static_cast<long long>(n), std::sqrt(num / std::max(den, 1e-300)));
  }
}

void bench_shape(CudaBackend& be, const MoeShape& s, double copy_bw) {
  const MoeParams p = params_of(s);
  std::vector<MoeWeights> layers;
  for (int i = 0; i < s.copies; ++i) layers.push_back(make_layer(be, s, 100 + 10 * static_cast<std::uint64_t>(i)));
  AKV_CUDA_CHECK(cudaDeviceSynchronize());  // the fills run on the default stream
  const std::int64_t max_n = 4096, pairs = max_n * s.top_k;
  constexpr int kLogitSets = 16;  // fresh routing each call
  auto x = be.alloc(DType::F32, max_n, s.hidden);
  auto logits = be.alloc(DType::F32, kLogitSets * max_n, s.n_experts);
  auto route = be.alloc(DType::F32, max_n, 2 * s.top_k);
  auto gate_up = be.alloc(DType::F32, pairs, 2 * s.inter);
  auto act = be.alloc(DType::F32, pairs, s.inter);
  auto down = be.alloc(DType::F32, pairs, s.hidden);
  auto out = be.alloc(DType::F32, max_n, s.hidden);
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> host(static_cast<std::size_t>(kLogitSets * max_n * s.n_experts));
  for (float& v : host) v = d(rng);
  be.upload(host, logits->tensor());
  host.resize(static_cast<std::size_t>(max_n * s.hidden));
  for (float& v : host) v = d(rng);
  be.upload(host, x->tensor());
  const MoeScratch scratch{route->tensor(), gate_up->tensor(), act->tensor(), down->tensor()};
  auto call = [&](std::int64_t n, int i) {
    const TensorRef l = logits->tensor().rows_slice((i % kLogitSets) * max_n, n);
    be.moe(x->tensor().rows_slice(0, n), l, layers[static_cast<std::size_t>(i % s.copies)], p, scratch,
           out->tensor().rows_slice(0, n));
  };
  const double decode_bytes = static_cast<double>(s.top_k) * expert_bytes(s);  // k distinct experts
  const double prefill_flops = 2.0 * static_cast<double>(max_n * s.top_k) * 3.0 * double(s.inter) * double(s.hidden);
  std::printf("\n%s: %lld experts, top %lld, width %lld; chosen experts of one token %.1f MB\n", s.name,
              static_cast<long long>(s.n_experts), static_cast<long long>(s.top_k), static_cast<long long>(s.inter),
              decode_bytes * 1e-6);
  std::printf("| path | tokens | time per layer | chosen-expert GB/s | of copy bandwidth | TFLOP/s |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  using Kernels = CudaBackend::MoeKernels;
  auto experts_only = [&](std::int64_t n, int i) {  // the int8 kernels on the last routing
    cuda::launch_moe_decode_quant(x->tensor().rows_slice(0, n),
                                  layers[static_cast<std::size_t>(i % s.copies)], p, scratch,
                                  out->tensor().rows_slice(0, n), be.stream(), be.sm_count());
  };
  if (s.gguf()) {
    auto route_only = [&](std::int64_t n, int i) {
      const TensorRef l = logits->tensor().rows_slice((i % kLogitSets) * max_n, n);
      cuda::launch_moe_route(l, p, scratch.route, be.stream());
    };
    return bench_gguf(be, s, copy_bw, call, route_only, experts_only, out->tensor(), decode_bytes, prefill_flops);
  }
  if (s.mxfp4)
    bench_mxfp4_decode(be, copy_bw, call, experts_only, out->tensor(), s.hidden, decode_bytes);
  be.set_moe_mxfp4_decode(
      CudaBackend::MoeMxfp4Decode::F32);  // the rows below: the f32 decode kernels
  for (const Kernels k : {Kernels::PerPair, Kernels::ExpertLoop, Kernels::Grouped}) {
    be.set_moe_kernels(k);
    const char* path = k == Kernels::PerPair      ? "old (per-pair kernels)"
                       : k == Kernels::ExpertLoop ? "new, a GEMM per expert"
                                                  : "new, grouped GEMM";
    using Decode = CudaBackend::MoeDecodeKernels;
    for (const Decode dk : {Decode::TwoLaunch, Decode::Pipelined}) {  // decode does not depend on the prefill GEMMs
      if (k == Kernels::Grouped || (k == Kernels::PerPair && dk == Decode::Pipelined)) continue;
      be.set_moe_decode_kernels(dk);
      const double t1 = seconds_per_call(be, 64, [&](int i) { call(1, i); });
      std::printf("| %s | 1 | %.1f us | %.0f | %.1f%% | - |\n",
                  k == Kernels::PerPair     ? path
                  : dk == Decode::TwoLaunch ? "new, decode: two launches (before)"
                  : s.mxfp4                 ? "new, decode: pipelined (f32)"
                                            : "new, decode: pipelined (the default)",
                  t1 * 1e6, decode_bytes / t1 * 1e-9, 100.0 * decode_bytes / t1 / copy_bw);
    }
    be.set_moe_decode_kernels(CudaBackend::MoeDecodeKernels::Pipelined);
    const std::int64_t grouped_before = be.moe_grouped_gemm_launches();
    const double tp = seconds_per_call(be, k == Kernels::PerPair ? 1 : 4, [&](int i) { call(max_n, i); });
    const bool grouped_ran = be.moe_grouped_gemm_launches() > grouped_before;
    std::printf("| %s%s | %lld | %.2f ms | - | - | %.1f |\n", path,
                k == Kernels::Grouped && !grouped_ran ? " (fell back to a GEMM per expert)" : "",
                static_cast<long long>(max_n), tp * 1e3, prefill_flops / tp * 1e-12);
  }
  // The new paths against the per-pair kernels on the same inputs (the parity tests hold the
  // oracle; this checks the benchmark measured working kernels on these shapes; MXFP4: the f32
  // decode kernels, the int8 ones against them above).
  for (const std::int64_t n : {std::int64_t{1}, max_n}) {
    std::vector<float> old_out(static_cast<std::size_t>(n * s.hidden)), new_out(old_out.size());
    be.set_moe_kernels(Kernels::PerPair);
    call(n, 0);
    be.download(out->tensor().rows_slice(0, n), old_out);
    be.set_moe_kernels(Kernels::Grouped);
    call(n, 0);
    be.download(out->tensor().rows_slice(0, n), new_out);
    double num = 0, den = 0;
    for (std::size_t i = 0; i < old_out.size(); ++i) {
      num += (double(new_out[i]) - old_out[i]) * (double(new_out[i]) - old_out[i]);
      den += double(old_out[i]) * old_out[i];
    }
    std::printf("%lld tokens: new vs per-pair output, relative L2 difference %.2e\n", static_cast<long long>(n),
                std::sqrt(num / std::max(den, 1e-300)));
  }
  be.set_moe_mxfp4_decode(CudaBackend::MoeMxfp4Decode::Int8);
}

}  // namespace

int run_moe_bench(double copy_bw) {
  CudaBackend be;
  std::printf("decode bound: the chosen experts' bytes at the device copy bandwidth (%.0f GB/s read + write)\n",
              copy_bw * 1e-9);
  for (const MoeShape& s : kShapes) bench_shape(be, s, copy_bw);
  return 0;
}

}  // namespace akv::bench
