// cuda_bench --hybrid-prefill 1: the two prefill ops of a Qwen3.5-9B-shaped hybrid that ran on the
// CUDA cores or token by token, old and new kernels side by side: one full-attention layer's
// attention (16 query / 4 KV heads of 256, BF16 KV) for 1,024 new tokens after 0, 4,096 and
// 15,360 cached ones (CUDA-core split kernel vs the tensor-core prefill kernel), and one Gated
// DeltaNet layer's short causal convolution (8,192 channels, kernel 4) token by token vs tiled.
// Milliseconds (device events, median after a warm-up), attention TFLOP/s (causal: 4 * heads *
// head_dim per query-key pair), and the relative difference of the two outputs (a sanity
// check, not the parity test).
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <span>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "bench_util.h"

namespace akv::bench {
void fill_bf16(void* p, std::int64_t n, std::uint64_t seed, float center, float scale);

namespace {

constexpr std::int64_t kHeads = 16, kKvHeads = 4, kHeadDim = 256, kBlock = 16;
constexpr std::int64_t kNew = 1024;
constexpr std::int64_t kContexts[] = {0, 4096, 15360};
constexpr std::int64_t kConvChannels = 8192, kConvRows = 3;  // 2 * 16 * 128 + 32 * 128; kernel 4
constexpr std::int64_t kConvTokens[] = {1, 16, 64, 1024, 4096};

std::vector<float> normal_floats(std::int64_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// Median milliseconds of `reps` calls of f after one warm-up, by events on `s`.
template <typename F>
double median_ms(CudaBackend& be, int reps, F&& f) {
  cudaEvent_t e0, e1;
  AKV_CUDA_CHECK(cudaEventCreate(&e0));
  AKV_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<double> t;
  for (int rep = 0; rep <= reps; ++rep) {
    AKV_CUDA_CHECK(cudaEventRecord(e0, be.stream()));
    f();
    AKV_CUDA_CHECK(cudaEventRecord(e1, be.stream()));
    AKV_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    AKV_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (rep > 0) t.push_back(ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void attention_table(CudaBackend& be) {
  const std::int64_t max_pos = kContexts[std::size(kContexts) - 1] + kNew;
  const std::int64_t n_blocks = max_pos / kBlock;
  KvStorage kv = be.alloc_kv(KvLayout{.n_layers = 1,
                                      .n_blocks = n_blocks,
                                      .block_size = kBlock,
                                      .n_kv_heads = kKvHeads,
                                      .head_dim = kHeadDim,
                                      .dtype = DType::BF16});
  const std::int64_t kv_elems = n_blocks * kBlock * kKvHeads * kHeadDim;
  fill_bf16(kv.k[0].data, kv_elems, 11, 0.0f, 1.0f);
  fill_bf16(kv.v[0].data, kv_elems, 12, 0.0f, 1.0f);
  std::vector<std::int32_t> table(static_cast<std::size_t>(n_blocks));  // scattered
  for (std::int64_t i = 0; i < n_blocks; ++i)
    table[i] = static_cast<std::int32_t>((i * 7919) % n_blocks);
  auto q = be.alloc(DType::F32, kNew, kHeads * kHeadDim);
  auto out = be.alloc(DType::F32, kNew, kHeads * kHeadDim);
  be.upload(normal_floats(kNew * kHeads * kHeadDim, 7), q->tensor());
  const AttentionParams p{.n_heads = kHeads,
                          .n_kv_heads = kKvHeads,
                          .head_dim = kHeadDim,
                          .scale = 1.0 / std::sqrt(double(kHeadDim)),
                          .window = 0,
                          .logit_softcap = 0.0};
  AKV_CUDA_CHECK(cudaDeviceSynchronize());
  std::printf(
      "\n| prefill attention, one layer (16 / 4 heads of 256, BF16 KV), %lld new tokens "
      "| CUDA cores (old) | tensor cores (new) | speed-up | out rel diff |\n"
      "| --- | --- | --- | --- | --- |\n",
      static_cast<long long>(kNew));
  for (const std::int64_t context : kContexts) {
    const SequenceChunk chunk{.first_row = 0,
                              .n_tokens = static_cast<std::int32_t>(kNew),
                              .start_pos = static_cast<std::int32_t>(context),
                              .block_table = table};
    const std::vector<std::int32_t> pos = positions_for({&chunk, 1});
    const std::vector<std::int32_t> ids(static_cast<std::size_t>(kNew));
    const ForwardBatch batch{
        .tokens = ids, .positions = pos, .sequences = {&chunk, 1}, .logit_rows = {}};
    // Causal: query i sees context + i + 1 keys.
    const double pairs = double(kNew) * double(context) + double(kNew) * double(kNew + 1) / 2;
    const double flop = 4.0 * double(kHeads) * double(kHeadDim) * pairs;
    double ms[2];
    std::vector<float> outs[2];
    for (int fast = 0; fast < 2; ++fast) {
      be.set_prefill_attention_d256(fast == 1);
      ms[fast] = median_ms(be, fast == 1 ? 20 : 5,
                           [&] { be.attention(q->tensor(), kv, 0, batch, p, out->tensor()); });
      outs[fast].resize(static_cast<std::size_t>(kNew * kHeads * kHeadDim));
      be.download(out->tensor(), outs[fast]);
    }
    be.set_prefill_attention_d256(true);
    std::printf(
        "| after %lld cached | %.2f ms (%.1f TFLOP/s) | %.2f ms (%.1f TFLOP/s) | %.1fx | %.2g |\n",
        static_cast<long long>(context), ms[0], flop / ms[0] * 1e-9, ms[1], flop / ms[1] * 1e-9,
        ms[0] / ms[1], rel_diff(outs[1], outs[0]));
  }
}

void conv_table(CudaBackend& be) {
  const std::int64_t n_max = kConvTokens[std::size(kConvTokens) - 1];
  KvStorage kv = be.alloc_kv(KvLayout{});
  alloc_state_arrays(be, kv,
                     {.n_layers = 1,
                      .n_slots = 1,
                      .conv_rows = kConvRows,
                      .conv_channels = kConvChannels,
                      .n_k_heads = 16,
                      .n_v_heads = 32,
                      .k_head_dim = 128,
                      .v_head_dim = 128});
  const WeightRef w = be.alloc_weight(DType::BF16, kConvChannels, kConvRows + 1);
  fill_bf16(const_cast<void*>(w.data), kConvChannels * (kConvRows + 1), 13, 0.0f, 0.5f);
  auto x = be.alloc(DType::F32, n_max, kConvChannels);
  const std::vector<float> x0 = normal_floats(n_max * kConvChannels, 9);
  AKV_CUDA_CHECK(cudaDeviceSynchronize());
  std::printf(
      "\n(eager chunks of %d+ tokens take the tiled convolution in serving)\n\n"
      "| short convolution, one layer (8,192 channels, kernel 4), 1 sequence after 1,024 tokens "
      "| token by token (old) | tiled (new) | speed-up | out rel diff |\n"
      "| --- | --- | --- | --- | --- |\n",
      cuda::kConvTileMinTokens);
  for (const std::int64_t n : kConvTokens) {
    // Continuing a carried state (start 1,024): the first tile's window comes from the state.
    const SequenceChunk chunk{.first_row = 0,
                              .n_tokens = static_cast<std::int32_t>(n),
                              .start_pos = 1024,
                              .block_table = {},
                              .state_slot = 0};
    const std::vector<std::int32_t> tokens(static_cast<std::size_t>(n), 1),
        positions(tokens.size(), 0);
    const ForwardBatch batch{
        .tokens = tokens, .positions = positions, .sequences = {&chunk, 1}, .logit_rows = {}};
    const TensorRef xt = x->tensor().rows_slice(0, n);
    double ms[2];
    std::vector<float> outs[2];
    const std::span<const float> xn =
        std::span<const float>(x0).first(static_cast<std::size_t>(n * kConvChannels));
    for (int tiled = 0; tiled < 2; ++tiled) {
      be.set_conv1d_tile_min_tokens(tiled == 1 ? 1 : INT32_MAX);
      be.upload(xn, xt);  // the timed calls run on their own outputs (the SiLU keeps them finite)
      ms[tiled] = median_ms(be, 10, [&] { be.causal_conv1d(xt, w, kv, 0, batch); });
      write_state_slot(be, kv, 0,
                       std::vector<float>(static_cast<std::size_t>(kv.state.slot_floats()), 0.5f));
      be.upload(xn, xt);
      be.causal_conv1d(xt, w, kv, 0, batch);
      outs[tiled].resize(static_cast<std::size_t>(n * kConvChannels));
      be.download(xt, outs[tiled]);
    }
    be.set_conv1d_tile_min_tokens(cuda::kConvTileMinTokens);
    std::printf("| %lld tokens | %.3f ms | %.3f ms | %.1fx | %.2g |\n", static_cast<long long>(n),
                ms[0], ms[1], ms[0] / ms[1], rel_diff(outs[1], outs[0]));
  }
}

}  // namespace

int run_hybrid_prefill_bench() {
  CudaBackend be;
  attention_table(be);
  conv_table(be);
  return 0;
}

}  // namespace akv::bench
