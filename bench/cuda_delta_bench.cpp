// cuda_bench --delta-rule 1: one Gated DeltaNet layer's delta rule (CudaBackend::gated_delta_rule)
// at Qwen3.5-9B's shape (16 key heads, 32 value heads, k_dim = v_dim = 128) on one fresh
// sequence of 64, 512, 4,096 and 16,384 tokens (and 8-32, where the chunked kernels' fixed cost
// sets cuda::kDeltaChunkMinTokens): the token-by-token kernel against the chunked kernels
// (delta_rule_chunked.cu) with each form of their products (cuda::DeltaChunkMath: f32 FMA,
// tensor cores 3xTF32 and TF32), milliseconds and tokens/s per layer, and the relative difference
// of each one's outputs and final state to the token-by-token kernel's (a sanity check, not the
// parity test); then each chunked form's two launches (prepare, state pass) timed alone.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "bench_util.h"

namespace akv::bench {
void fill_bf16(void* p, std::int64_t n, std::uint64_t seed, float center, float scale);

namespace {

constexpr std::int64_t kKeyHeads = 16, kValueHeads = 32, kKeyDim = 128, kValueDim = 128;
constexpr std::int64_t kTokens[] = {8, 16, 32, 64, 512, 4096, 16384};

// Uniform values in [center - scale, center + scale) from a fixed-seed LCG (fast on the host).
std::vector<float> host_uniform(std::int64_t n, std::uint64_t seed, float center, float scale) {
  std::vector<float> v(static_cast<std::size_t>(n));
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& f : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    f = center + scale * (2.0f * static_cast<float>(x >> 40) * (1.0f / 16777216.0f) - 1.0f);
  }
  return v;
}

}  // namespace

int run_delta_rule_bench() {
  CudaBackend be;
  const std::int64_t n_max = kTokens[std::size(kTokens) - 1];
  const std::int64_t key_dim = kKeyHeads * kKeyDim,
                     qkv_cols = 2 * key_dim + kValueHeads * kValueDim;
  KvStorage kv = be.alloc_kv(KvLayout{});
  alloc_state_arrays(be, kv,
                     {.n_layers = 1,
                      .n_slots = 2,
                      .conv_rows = 3,
                      .conv_channels = qkv_cols,
                      .n_k_heads = kKeyHeads,
                      .n_v_heads = kValueHeads,
                      .k_head_dim = kKeyDim,
                      .v_head_dim = kValueDim});
  auto qkv = be.alloc(DType::F32, n_max, qkv_cols);
  auto a = be.alloc(DType::F32, n_max, kValueHeads), b = be.alloc(DType::F32, n_max, kValueHeads);
  auto out = be.alloc(DType::F32, n_max, kValueHeads * kValueDim);
  be.upload(host_uniform(n_max * qkv_cols, 1, 0.0f, 1.0f), qkv->tensor());
  be.upload(host_uniform(n_max * kValueHeads, 2, -2.0f, 2.0f), a->tensor());  // decays near e^-0.5
  be.upload(host_uniform(n_max * kValueHeads, 3, 0.0f, 3.0f), b->tensor());
  const WeightRef a_log = be.alloc_weight(DType::BF16, 1, kValueHeads);
  const WeightRef dt_bias = be.alloc_weight(DType::BF16, 1, kValueHeads);
  fill_bf16(const_cast<void*>(a_log.data), kValueHeads, 4, 1.0f, 1.0f);
  fill_bf16(const_cast<void*>(dt_bias.data), kValueHeads, 5, 0.0f, 1.0f);
  AKV_CUDA_CHECK(cudaDeviceSynchronize());

  cudaEvent_t e0, e1;
  AKV_CUDA_CHECK(cudaEventCreate(&e0));
  AKV_CUDA_CHECK(cudaEventCreate(&e1));
  // Median milliseconds of 3 runs of f after a warm-up, device events around it.
  const auto median_ms = [&](const auto& f) {
    std::vector<double> t;
    for (int rep = 0; rep < 4; ++rep) {
      AKV_CUDA_CHECK(cudaEventRecord(e0, be.stream()));
      f();
      AKV_CUDA_CHECK(cudaEventRecord(e1, be.stream()));
      AKV_CUDA_CHECK(cudaEventSynchronize(e1));
      float elapsed = 0;
      AKV_CUDA_CHECK(cudaEventElapsedTime(&elapsed, e0, e1));
      if (rep > 0) t.push_back(elapsed);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  std::printf("\n(eager chunks of %d+ tokens take the chunked kernels in serving)\n\n",
              cuda::kDeltaChunkMinTokens);
  // Form 0: token by token; then the chunked kernels with each form of their products.
  struct Form {
    const char* name;
    cuda::DeltaChunkMath math;
  };
  constexpr Form kChunked[] = {{"chunked, f32 FMA", cuda::DeltaChunkMath::Fma},
                               {"chunked, 3xTF32", cuda::DeltaChunkMath::Tf32x3},
                               {"chunked, TF32", cuda::DeltaChunkMath::Tf32}};
  constexpr int kForms = 1 + static_cast<int>(std::size(kChunked));
  std::printf(
      "| delta rule, Qwen3.5-9B layer (16 k-heads, 32 v-heads of 128), 1 sequence | token by "
      "token");
  for (const Form& f : kChunked) std::printf(" | %s (out / state rel diff)", f.name);
  std::printf(" | 3xTF32 / FMA speed-up |\n| ---");
  for (int i = 0; i <= kForms; ++i) std::printf(" | ---");
  std::printf(" |\n");
  for (const std::int64_t n : kTokens) {
    const auto n32 = static_cast<std::int32_t>(n);
    const SequenceChunk chunk{
        .first_row = 0, .n_tokens = n32, .start_pos = 0, .block_table = {}, .state_slot = 0};
    const std::vector<std::int32_t> tokens(static_cast<std::size_t>(n), 1),
        positions(tokens.size(), 0);
    const ForwardBatch batch{
        .tokens = tokens, .positions = positions, .sequences = {&chunk, 1}, .logit_rows = {}};
    const TensorRef q = qkv->tensor().rows_slice(0, n), at = a->tensor().rows_slice(0, n),
                    bt = b->tensor().rows_slice(0, n), o = out->tensor().rows_slice(0, n);
    std::vector<float> outs[kForms], states[kForms];
    double ms[kForms] = {};
    for (int form = 0; form < kForms; ++form) {
      be.set_delta_rule_chunk_min_tokens(form > 0 ? 1 : INT32_MAX);
      if (form > 0) be.set_delta_chunk_math(kChunked[form - 1].math);
      ms[form] =
          median_ms([&] { be.gated_delta_rule(q, at, bt, a_log, dt_bias, kv, 0, batch, o); });
      outs[form].resize(static_cast<std::size_t>(n * kValueHeads * kValueDim));
      be.download(o, outs[form]);
      states[form].resize(static_cast<std::size_t>(kv.state.slot_floats()));
      read_state_slot(be, kv, 0, states[form]);
    }
    be.set_delta_rule_chunk_min_tokens(cuda::kDeltaChunkMinTokens);
    be.set_delta_chunk_math(cuda::DeltaChunkMath::Tf32x3);
    std::printf("| %lld tokens | %.3f ms (%.0f tok/s)", static_cast<long long>(n), ms[0],
                double(n) / ms[0] * 1e3);
    for (int form = 1; form < kForms; ++form)
      std::printf(" | %.3f ms (%.0f tok/s; %.2fx) %.2g / %.2g", ms[form],
                  double(n) / ms[form] * 1e3, ms[0] / ms[form], rel_diff(outs[form], outs[0]),
                  rel_diff(states[form], states[0]));
    std::printf(" | %.2fx |\n", ms[1] / ms[2]);
  }

  // Each chunked form's two launches alone (the launcher with the serving scratch size: the same
  // windows), one sequence in slot 0 from position 0.
  std::printf(
      "\n| the chunked launches alone: prepare / state pass | f32 FMA | 3xTF32 | TF32 |\n"
      "| --- | --- | --- | --- |\n");
  std::int32_t* seq_dev = nullptr;  // [1][4] first_row, n_tokens, start_pos, slot
  AKV_CUDA_CHECK(cudaMalloc(&seq_dev, 4 * sizeof(std::int32_t)));
  const std::size_t scratch_bytes =
      cuda::delta_rule_chunked_scratch_bytes(1, static_cast<int>(n_max), kValueHeads);
  void* scratch = nullptr;
  AKV_CUDA_CHECK(cudaMalloc(&scratch, scratch_bytes));
  for (const std::int64_t n : kTokens) {
    if (n < cuda::kDeltaChunkTokens) continue;
    const std::int32_t seq[4] = {0, static_cast<std::int32_t>(n), 0, 0};
    AKV_CUDA_CHECK(cudaMemcpy(seq_dev, seq, sizeof(seq), cudaMemcpyHostToDevice));
    const TensorRef q = qkv->tensor().rows_slice(0, n), at = a->tensor().rows_slice(0, n),
                    bt = b->tensor().rows_slice(0, n), o = out->tensor().rows_slice(0, n);
    std::printf("| %lld tokens", static_cast<long long>(n));
    for (const Form& f : kChunked) {
      double launch_ms[2] = {};
      for (int which = 0; which < 2; ++which) {
        const cuda::DeltaChunkLaunches launches = which == 0 ? cuda::DeltaChunkLaunches::PrepareOnly
                                                             : cuda::DeltaChunkLaunches::StateOnly;
        launch_ms[which] = median_ms([&] {
          cuda::launch_gated_delta_rule_chunked(q, at, bt, a_log, dt_bias, kv.recurrent_state[0],
                                                seq_dev, 1, static_cast<int>(n), kKeyHeads,
                                                kValueHeads, kKeyDim, kValueDim, o, scratch,
                                                scratch_bytes, f.math, be.stream(), launches);
        });
      }
      std::printf(" | %.3f / %.3f ms", launch_ms[0], launch_ms[1]);
    }
    std::printf(" |\n");
  }
  AKV_CUDA_CHECK(cudaFree(scratch));
  AKV_CUDA_CHECK(cudaFree(seq_dev));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 0;
}

}  // namespace akv::bench
