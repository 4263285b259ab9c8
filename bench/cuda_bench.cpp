// CUDA backend benchmark (docs/perf/cuda.md): measures the device copy bandwidth and the cuBLAS
// bf16 GEMM rate, then runs an 8B Llama-3.1-shaped model with random bf16 weights generated on
// the GPU through the backend's ops (the model blocks of src/models): decode at 1, 8 and 32
// sequences against the bandwidth bound, eagerly and as CUDA graphs (recorded steps), per-op GPU
// time at 1, 8 and 32 sequences, a 4K-token prefill and the cold time to first token from 1K to
// 32K tokens. --prefill-only 1 measures only the prefill, its per-op table and the cold TTFT;
// --decode-only 1 only the 8- and 32-sequence decode (logits copied back, then greedy ids picked
// on the device, alternating in one run). --chunk-attention 1 measures only chunks of 1, 10, 64,
// 351, 512, 533, 576 and 640 tokens after --chunk-context (16,000) cached ones: one layer's attention alone and a
// whole forward (the time to the last token's logits; 512 and 533 tokens also after 0-500 ms of
// idle GPU, as a served next turn starts), with the chunk attention paths off (one
// token a split-K block, unsplit prefill tiles) and on, side by side. --quant-gemv 1 measures only
// the quantized GEMV per GGUF type against the copy bandwidth (cuda_quant_bench.cpp). --moe 1
// measures only one MoE layer of the Qwen3-30B-A3B and GPT-OSS-20B shapes, decode and prefill,
// old and new kernels (cuda_moe_bench.cpp). --tier-copy 1 measures only the host tier's copies
// of 8B-shaped KV blocks next to the PCIe link's DMA rate (cuda_tier_bench.cpp). --delta-rule 1
// measures only one Qwen3.5-9B-shaped layer's gated delta rule at 512, 4K and 16K tokens, token
// by token and chunked (cuda_delta_bench.cpp). --hybrid-prefill 1 measures only one Qwen3.5-9B-shaped
// layer's head_dim-256 prefill attention (1,024 tokens after 0, 4K and 15K cached) on the CUDA
// cores and the tensor cores, and its short convolution token by token and tiled
// (cuda_hybrid_bench.cpp). --weights q8_0 | q4_k | q4_k_m gives the model random GGUF blocks
// instead of bf16 (uploaded as a file's, so the quantized GEMV, MMA and dequantize paths run as
// for a GGUF model; q4_k_m: llama-quantize's type per matrix, see weight_type).
// Usage: cuda_bench [--layers N] [--prefill N] [--steps N] [--ttft-max N] [--prefill-only 1] [--decode-only 1]
//                   [--chunk-attention 1] [--chunk-context N] [--quant-gemv 1] [--moe 1] [--tier-copy 1]
//                   [--delta-rule 1] [--hybrid-prefill 1] [--weights bf16|q8_0|q4_k|q4_k_m]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/op_timer.h"
#include "backend/cuda/cuda_check.h"
#include "bench_util.h"
#include "models/blocks.h"
#include "tensor/safetensors.h"

namespace akv::bench {
void fill_bf16(void* p, std::int64_t n, std::uint64_t seed, float center, float scale);
int run_quant_gemv_bench(double copy_bw);
int run_moe_bench(double copy_bw);
int run_tier_bench();
int run_delta_rule_bench();
int run_hybrid_prefill_bench();
}

namespace akv {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times `f` with device events on `stream` (the one f's work goes to): median over `reps` after
// `warmup` runs, in seconds.
template <typename F>
double time_events(F&& f, int warmup, int reps, cudaStream_t stream = nullptr) {
  cudaEvent_t a, b;
  AKV_CUDA_CHECK(cudaEventCreate(&a));
  AKV_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    AKV_CUDA_CHECK(cudaEventRecord(a, stream));
    f();
    AKV_CUDA_CHECK(cudaEventRecord(b, stream));
    AKV_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    AKV_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e-3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(t);
}

// Bytes read + written per second by a large device-to-device copy.
double copy_bandwidth() {
  const std::size_t bytes = std::size_t{2} << 30;
  void *src, *dst;
  AKV_CUDA_CHECK(cudaMalloc(&src, bytes));
  AKV_CUDA_CHECK(cudaMalloc(&dst, bytes));
  bench::fill_bf16(src, static_cast<std::int64_t>(bytes / 2), 1, 0.0f, 1.0f);
  const double t = time_events([&] { AKV_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); }, 3, 20);
  cudaFree(src);
  cudaFree(dst);
  return 2.0 * static_cast<double>(bytes) / t;
}

// FLOP/s of an 8192^3 bf16 GEMM (f32 accumulate) through cuBLAS, on random data.
double gemm_rate() {
  const int n = 8192;
  const std::size_t elems = std::size_t{n} * n;
  void *a, *b, *c;
  AKV_CUDA_CHECK(cudaMalloc(&a, elems * 2));
  AKV_CUDA_CHECK(cudaMalloc(&b, elems * 2));
  AKV_CUDA_CHECK(cudaMalloc(&c, elems * 2));
  bench::fill_bf16(a, static_cast<std::int64_t>(elems), 2, 0.0f, 1.0f);
  bench::fill_bf16(b, static_cast<std::int64_t>(elems), 3, 0.0f, 1.0f);
  cublasHandle_t h;
  AKV_CUBLAS_CHECK(cublasCreate(&h));
  const float one = 1.0f, zero = 0.0f;
  const double t = time_events(
      [&] {
        AKV_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n,
                                      &zero, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      },
      3, 10);
  cublasDestroy(h);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return 2.0 * n * double(n) * n / t;
}

ModelConfig llama31_8b(std::int64_t n_layers) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.vocab_size = 128256;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.n_layers = n_layers;
  c.n_heads = 32;
  c.n_kv_heads = 8;
  c.head_dim = 128;
  c.max_position_embeddings = 131072;
  c.rms_norm_eps = 1e-5;
  c.attention_scale = 1.0 / std::sqrt(128.0);
  c.dtype = DType::BF16;
  return c;
}

struct Layer {
  WeightRef attn_norm, mlp_norm;
  AttentionWeights attn;
  MlpWeights mlp;
};

// The weights of RandomLlama: bf16, or every matrix but the embedding in one GGUF type, or
// llama-quantize's Q4_K_M mix: Q4_K, with Q6_K for the output head and for v and down in the
// first and last eighth of the layers and every third layer between.
enum class WeightMix { Bf16, Q8_0, Q4_K, Q4_K_M };
enum class Role { V, Down, Output, Other };

DType weight_type(WeightMix mix, Role role, std::int64_t layer, std::int64_t n_layers) {
  switch (mix) {
    case WeightMix::Bf16: return DType::BF16;
    case WeightMix::Q8_0: return DType::Q8_0;
    case WeightMix::Q4_K: return DType::Q4_K;
    case WeightMix::Q4_K_M: break;
  }
  const bool more_bits =
      layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
  if (role == Role::Output || ((role == Role::V || role == Role::Down) && more_bits)) return DType::Q6_K;
  return DType::Q4_K;
}

const char* weight_mix_name(WeightMix mix) {
  switch (mix) {
    case WeightMix::Bf16: return "bf16";
    case WeightMix::Q8_0: return "Q8_0";
    case WeightMix::Q4_K: return "Q4_K";
    case WeightMix::Q4_K_M: return "Q4_K_M mix";
  }
  return "?";
}

// The Llama forward pass of src/models/llama.cpp (fused residual add + norm) over random device weights.
class RandomLlama {
 public:
  // weights: bf16 (generated on the GPU), or a GGUF mix (random blocks uploaded as a file's are).
  RandomLlama(CudaBackend& b, const ModelConfig& c, WeightMix weights = WeightMix::Bf16)
      : b_(b), ops_(&b), c_(c), ws_(b) {
    std::uint64_t seed = 100;
    // Random block bytes <= 0x1b: every f16 scale finite and small. One host buffer, the largest
    // matrix's, uploaded for each (the values do not matter to the timing).
    std::vector<std::uint8_t> blocks;
    auto quantized = [&](DType t, std::int64_t rows, std::int64_t cols) {
      const std::size_t bytes = static_cast<std::size_t>(rows) * dtype_row_bytes(t, cols);
      if (blocks.size() < bytes) {
        std::mt19937_64 rng(seed);
        blocks.resize(bytes);
        for (std::size_t i = 0; i < bytes; i += 8)
          for (std::uint64_t r = rng(), k = 0; k < 8 && i + k < bytes; ++k, r >>= 8)
            blocks[i + k] = static_cast<std::uint8_t>((r & 0xff) % 0x1c);
      }
      const TensorInfo info{.name = "random", .dtype = t, .shape = {rows, cols}, .bytes = {blocks.data(), bytes},
                            .file = "(random)"};
      return b_.upload_weight(info);
    };
    std::int64_t layer = 0;  // the layer being built (the Q4_K_M rule below)
    auto mat_of = [&](std::int64_t rows, std::int64_t cols, Role role) {
      const DType t = weight_type(weights, role, layer, c.n_layers);
      decode_bytes_ += rows * static_cast<std::int64_t>(dtype_row_bytes(t, cols));
      if (t != DType::BF16) return quantized(t, rows, cols);
      WeightRef w = b_.alloc_weight(DType::BF16, rows, cols);
      bench::fill_bf16(const_cast<void*>(w.data), rows * cols, ++seed, 0.0f, 1.0f / std::sqrt(float(cols)));
      return w;
    };
    auto mat = [&](std::int64_t rows, std::int64_t cols) { return mat_of(rows, cols, Role::Other); };
    auto norm = [&](std::int64_t n) {
      WeightRef w = b_.alloc_weight(DType::BF16, 1, n);
      bench::fill_bf16(const_cast<void*>(w.data), n, ++seed, 1.0f, 0.1f);
      return w;
    };
    const std::int64_t q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim;
    embed_ = b_.alloc_weight(DType::BF16, c.vocab_size, c.hidden_size);  // rows gathered: not read whole
    bench::fill_bf16(const_cast<void*>(embed_.data), c.vocab_size * c.hidden_size, ++seed, 0.0f, 0.02f);
    for (layer = 0; layer < c.n_layers; ++layer) {
      Layer L;
      L.attn_norm = norm(c.hidden_size);
      L.mlp_norm = norm(c.hidden_size);
      L.attn.q = mat(q, c.hidden_size);
      L.attn.k = mat(kv, c.hidden_size);
      L.attn.v = mat_of(kv, c.hidden_size, Role::V);
      L.attn.o = mat(c.hidden_size, q);
      L.mlp.gate = mat(c.intermediate_size, c.hidden_size);
      L.mlp.up = mat(c.intermediate_size, c.hidden_size);
      L.mlp.down = mat_of(c.hidden_size, c.intermediate_size, Role::Down);
      layers_.push_back(L);
      decode_bytes_ += 2 * 2 * c.hidden_size;  // the norms
    }
    final_norm_ = norm(c.hidden_size);
    lm_head_ = mat_of(c.vocab_size, c.hidden_size, Role::Output);
    decode_bytes_ += 2 * c.hidden_size;
    for (std::int64_t i = 0; i < c.head_dim / 2; ++i)
      inv_freq_.push_back(std::pow(500000.0, -2.0 * double(i) / double(c.head_dim)));
    AKV_CUDA_CHECK(cudaDeviceSynchronize());
  }

  // Where the forward pass sends its ops (the CUDA backend, or a timing wrapper of it).
  void set_ops(Backend& ops) { ops_ = &ops; }

  // Weight bytes one decode step reads (all but the embedding table).
  std::int64_t decode_bytes() const { return decode_bytes_; }

  // Ends with the logits downloaded, or (ids non-empty) with only their ids: sample_rows at
  // `temperature` (0: argmax) with uniforms u, as the engine's steps do.
  void forward(const ForwardBatch& batch, KvStorage& kv, std::span<float> logits, std::span<std::int32_t> ids = {},
               std::span<const float> temperature = {}, std::span<const double> u = {}) {
    const auto n = static_cast<std::int64_t>(batch.tokens.size());
    const auto n_logits = static_cast<std::int64_t>(batch.logit_rows.size());
    ws_.reserve(c_, n);
    if (n_logits > logits_capacity_) {
      hidden_ = b_.alloc(DType::F32, n_logits, c_.hidden_size);
      out_ = b_.alloc(DType::F32, n_logits, c_.vocab_size);
      logits_capacity_ = n_logits;
    }
    const void* key = ids.empty() ? static_cast<const void*>(this) : &ids_key_;
    ops_->begin_step(batch, kv, key);
    ops_->embed(embed_, batch.tokens, 1.0f, ws_.x);
    const float eps = static_cast<float>(c_.rms_norm_eps);
    for (std::int64_t l = 0; l < c_.n_layers; ++l) {
      LayerContext ctx{.backend = *ops_, .batch = batch, .kv = kv, .ws = ws_, .layer = l,
                       .rope = {inv_freq_, c_.head_dim, 1.0},
                       .attention = {.n_heads = c_.n_heads, .n_kv_heads = c_.n_kv_heads, .head_dim = c_.head_dim,
                                     .scale = c_.attention_scale, .window = 0, .logit_softcap = 0.0}};
      const Layer& w = layers_[l];
      if (l == 0)
        ops_->rms_norm(ws_.x, w.attn_norm, eps, 0.0f, ws_.xn);
      else
        ops_->add_rms_norm(ws_.x, ws_.y, w.attn_norm, eps, 0.0f, ws_.xn);
      run_attention(w.attn, ctx, ws_.xn);
      ops_->add_rms_norm(ws_.x, ws_.y, w.mlp_norm, eps, 0.0f, ws_.xn);
      run_mlp(w.mlp, ctx, ws_.xn, GluActivation::Silu);
      if (l + 1 == c_.n_layers) ops_->add(ws_.x, ws_.y);
    }
    const TensorRef hidden = hidden_->tensor().rows_slice(0, n_logits);
    const TensorRef out = out_->tensor().rows_slice(0, n_logits);
    ops_->gather_rows(ws_.x, batch.logit_rows, hidden);
    ops_->rms_norm(hidden, final_norm_, eps, 0.0f, hidden);
    ops_->matmul(hidden, lm_head_, nullptr, out);
    if (ids.empty())
      ops_->download(out, logits);
    else
      ops_->sample_rows(out, temperature, u, ids);
    ops_->end_step();
  }

 private:
  CudaBackend& b_;
  Backend* ops_;
  ModelConfig c_;
  Workspace ws_;
  WeightRef embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  std::vector<double> inv_freq_;
  std::int64_t decode_bytes_ = 0;
  std::unique_ptr<DeviceBuffer> hidden_, out_;
  std::int64_t logits_capacity_ = 0;
  char ids_key_ = 0;  // recorded steps that end in sample_rows
};

using bench::seconds_since;

// Tokens of a chunk at `start` (any ids: random weights make every token alike).
std::vector<std::int32_t> ids_at(std::int64_t start, std::int64_t n, std::int64_t vocab) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) ids[i] = static_cast<std::int32_t>((start + i) * 2654435761u % vocab);
  return ids;
}

// Chunk lengths --chunk-attention measures (ascending): a served next turn is 512 new tokens plus
// the template's and the previous reply's, so sizes just above 512 too.
constexpr std::array<std::int64_t, 8> kChunkSizes = {1, 10, 64, 351, 512, 533, 576, 640};

// --chunk-attention: each chunk of kChunkSizes after `context` cached tokens (filled by one
// prefill first), timed with the chunk attention paths off and on: layer 0's attention alone
// (device events, median of 20) and the whole forward through `step` (wall clock to the
// logits on the host, median of 5).
template <typename Step>
void measure_chunks(CudaBackend& be, const ModelConfig& c, KvStorage& kv, const std::vector<std::int32_t>& table,
                    std::int64_t context, Step&& step) {
  for (std::int64_t done = 0; done < context;) {  // the cached context, in chunks of at most 16K tokens
    const std::int64_t n = std::min<std::int64_t>(16384, context - done);
    step(done, n);
    done += n;
  }
  const std::int64_t max_n = kChunkSizes.back();
  auto q = be.alloc(DType::F32, max_n, c.n_heads * c.head_dim);
  auto out = be.alloc(DType::F32, max_n, c.n_heads * c.head_dim);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> qh(static_cast<std::size_t>(max_n * c.n_heads * c.head_dim));
  for (float& x : qh) x = normal(rng);
  be.upload(qh, q->tensor());
  const AttentionParams p{.n_heads = c.n_heads, .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim,
                          .scale = c.attention_scale, .window = 0, .logit_softcap = 0.0};
  std::printf("\n| chunk after %lld cached tokens | attention, one layer: old | new | forward, %lld layers: old | new |\n"
              "| --- | --- | --- | --- | --- |\n",
              static_cast<long long>(context), static_cast<long long>(c.n_layers));
  for (const std::int64_t n : kChunkSizes) {
    const SequenceChunk chunk{.first_row = 0, .n_tokens = static_cast<std::int32_t>(n),
                              .start_pos = static_cast<std::int32_t>(context), .block_table = table};
    const std::vector<std::int32_t> pos = positions_for({&chunk, 1});
    const std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
    const ForwardBatch batch{.tokens = ids, .positions = pos, .sequences = {&chunk, 1}, .logit_rows = {}};
    double attn_ms[2], fwd_ms[2];
    for (int on = 0; on < 2; ++on) {
      be.set_chunk_attention(on == 1);
      attn_ms[on] = 1e3 * time_events(
                              [&] {
                                be.attention(q->tensor().rows_slice(0, n), kv, 0, batch, p,
                                             out->tensor().rows_slice(0, n));
                              },
                              3, 20, be.stream());
      step(context, n);  // warm-up
      std::vector<double> t;
      for (int i = 0; i < 5; ++i) t.push_back(step(context, n));
      fwd_ms[on] = 1e3 * median(t);
    }
    std::printf("| %lld tokens | %.3f ms | %.3f ms | %.2f ms | %.2f ms |\n", static_cast<long long>(n), attn_ms[0],
                attn_ms[1], fwd_ms[0], fwd_ms[1]);
  }
  // A served next turn starts after the GPU has idled (the client reads the reply and sends the
  // next request): the 512- and 533-token forwards again, each after an idle gap.
  std::printf("\n| forward after an idle gap (chunk paths on) | 0 ms | 20 ms | 100 ms | 500 ms |\n| --- | --- | --- | --- | --- |\n");
  for (const std::int64_t n : {std::int64_t{512}, std::int64_t{533}}) {
    std::printf("| %lld tokens |", static_cast<long long>(n));
    for (const int idle_ms : {0, 20, 100, 500}) {
      std::vector<double> t;
      for (int i = 0; i < 5; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
        t.push_back(step(context, n));
      }
      std::printf(" %.2f ms |", 1e3 * median(t));
    }
    std::printf("\n");
  }
}

struct DecodeTime {
  double median_s = 0, mean_s = 0;
};

int run(int argc, char** argv) {
  std::int64_t n_layers = 32, prefill = 4096, steps = 128, ttft_max = 32768, prefill_only = 0, decode_only = 0;
  std::int64_t chunk_attention = 0, chunk_context = 16000, quant_gemv = 0, moe = 0, tier_copy = 0, delta_rule = 0,
               hybrid_prefill = 0;
  WeightMix weights = WeightMix::Bf16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const std::int64_t v = std::atoll(argv[i + 1]);
    if (a == "--weights") {
      const std::string w = argv[i + 1];
      if (w == "q8_0") weights = WeightMix::Q8_0;
      else if (w == "q4_k") weights = WeightMix::Q4_K;
      else if (w == "q4_k_m") weights = WeightMix::Q4_K_M;
      else if (w != "bf16") {
        std::fprintf(stderr, "cuda_bench: --weights %s: expected bf16, q8_0, q4_k or q4_k_m\n", w.c_str());
        return 2;
      }
    }
    if (a == "--layers") n_layers = v;
    else if (a == "--prefill") prefill = v;
    else if (a == "--steps") steps = v;
    else if (a == "--ttft-max") ttft_max = v;
    else if (a == "--prefill-only") prefill_only = v;
    else if (a == "--decode-only") decode_only = v;
    else if (a == "--chunk-attention") chunk_attention = v;
    else if (a == "--chunk-context") chunk_context = v;
    else if (a == "--quant-gemv") quant_gemv = v;
    else if (a == "--moe") moe = v;
    else if (a == "--tier-copy") tier_copy = v;
    else if (a == "--delta-rule") delta_rule = v;
    else if (a == "--hybrid-prefill") hybrid_prefill = v;
  }
  cudaDeviceProp prop{};
  AKV_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::printf("device: %s, %d SMs, %.1f GiB; CUDA driver API %d, runtime %d\n", prop.name, prop.multiProcessorCount,
              double(prop.totalGlobalMem) / double(1 << 30), driver, runtime);

  if (tier_copy != 0) return bench::run_tier_bench();
  if (delta_rule != 0) return bench::run_delta_rule_bench();
  if (hybrid_prefill != 0) return bench::run_hybrid_prefill_bench();
  const double bw = copy_bandwidth();
  if (quant_gemv != 0) {
    std::printf("device copy bandwidth (read + write): %.0f GB/s\n", bw * 1e-9);
    return bench::run_quant_gemv_bench(bw);
  }
  if (moe != 0) {
    std::printf("device copy bandwidth (read + write): %.0f GB/s\n", bw * 1e-9);
    return bench::run_moe_bench(bw);
  }
  const double flops = gemm_rate();
  std::printf("device copy bandwidth (read + write): %.0f GB/s\n", bw * 1e-9);
  std::printf("cuBLAS bf16 GEMM 8192^3: %.0f TFLOP/s\n", flops * 1e-12);

  CudaBackend be;
  const ModelConfig c = llama31_8b(n_layers);
  auto t0 = std::chrono::steady_clock::now();
  RandomLlama model(be, c, weights);
  std::printf("model: Llama-3.1-8B shape, %lld layers, %s weights %.2f GB (%.2f GB read a decode step; made in %.1f s)\n",
              static_cast<long long>(n_layers), weight_mix_name(weights), double(be.weight_bytes()) * 1e-9,
              double(model.decode_bytes()) * 1e-9, seconds_since(t0));

  // One KV pool for every measurement, in the dtype `serve` allocates on this backend: a long
  // single sequence, or 32 sequences of 1K + decode.
  const std::int64_t block = 16, multi_ctx = 1024, multi_len = multi_ctx + 2 * (steps + 8) + 16;
  const std::int64_t max_len =
      std::max({prefill + steps + 64, ttft_max + 16, 32 * multi_len, chunk_context + kChunkSizes.back() + 16});
  const std::int64_t n_blocks = (max_len + block - 1) / block;
  KvStorage kv = be.alloc_kv(KvLayout{.n_layers = n_layers, .n_blocks = n_blocks, .block_size = block,
                                      .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim, .dtype = be.preferred_kv_dtype()});
  std::vector<std::int32_t> table(static_cast<std::size_t>(n_blocks));  // scattered
  for (std::int64_t i = 0; i < n_blocks; ++i) table[i] = static_cast<std::int32_t>((i * 7919) % n_blocks);
  const std::int64_t kv_bytes_per_pos = kv.layout.block_bytes() / block;  // K and V of every layer
  std::vector<float> logits(static_cast<std::size_t>(c.vocab_size) * 32);

  // One chunk of one sequence at `start`; returns seconds (the forward ends with a logits download).
  auto step = [&](std::int64_t start, std::int64_t n) {
    const std::vector<std::int32_t> ids = ids_at(start, n, c.vocab_size);
    const SequenceChunk chunk{.first_row = 0, .n_tokens = static_cast<std::int32_t>(n),
                              .start_pos = static_cast<std::int32_t>(start), .block_table = table};
    const std::vector<std::int32_t> pos = positions_for({&chunk, 1});
    const std::int32_t last = static_cast<std::int32_t>(n - 1);
    const ForwardBatch batch{.tokens = ids, .positions = pos, .sequences = {&chunk, 1}, .logit_rows = {&last, 1}};
    const auto t = std::chrono::steady_clock::now();
    model.forward(batch, kv, std::span<float>(logits).first(static_cast<std::size_t>(c.vocab_size)));
    return seconds_since(t);
  };

  if (chunk_attention != 0) {
    measure_chunks(be, c, kv, table, chunk_context, step);
    return 0;
  }

  CudaOpTimer timer(be);
  // n_seqs sequences decoding together after 1K-token prompts (each its own scattered blocks):
  // tok/s and the ratio to the bound (weights once per step + every sequence's KV).
  struct Multi {
    std::int64_t n_seqs;
    DecodeTime eager, graph, graph_ids, graph_sampled, graph_again, graph_ids_again, graph_sampled_again;
    double bound_step_s;
  };
  auto multi = [&](std::int64_t n_seqs) {
    const std::int64_t per = n_blocks / n_seqs;
    std::vector<std::vector<std::int32_t>> tables(static_cast<std::size_t>(n_seqs));
    for (std::int64_t i = 0; i < n_seqs; ++i)
      tables[i].assign(table.begin() + i * per, table.begin() + (i + 1) * per);
    std::vector<std::int32_t> picked(static_cast<std::size_t>(n_seqs));
    // How each step ends: the logits download, or sample_rows (ids back) at temperature 0 or 1.
    enum class Ending { Logits, GreedyIds, SampledIds };
    Ending ending = Ending::Logits;
    const std::vector<float> greedy(static_cast<std::size_t>(n_seqs), 0.0f), temperature(greedy.size(), 1.0f);
    std::vector<double> u(static_cast<std::size_t>(n_seqs));
    std::mt19937_64 uniform_rng(1);
    // One forward of n_seqs chunks of `n` tokens each at `start`.
    auto batch_step = [&](std::int64_t start, std::int64_t n) {
      std::vector<std::int32_t> ids, rows;
      std::vector<SequenceChunk> chunks;
      for (std::int64_t i = 0; i < n_seqs; ++i) {
        chunks.push_back({.first_row = static_cast<std::int32_t>(ids.size()), .n_tokens = static_cast<std::int32_t>(n),
                          .start_pos = static_cast<std::int32_t>(start), .block_table = tables[i]});
        const std::vector<std::int32_t> more = ids_at(start + 977 * i, n, c.vocab_size);
        ids.insert(ids.end(), more.begin(), more.end());
        rows.push_back(static_cast<std::int32_t>(ids.size() - 1));
      }
      const std::vector<std::int32_t> pos = positions_for(chunks);
      const ForwardBatch batch{.tokens = ids, .positions = pos, .sequences = chunks, .logit_rows = rows};
      for (double& x : u) x = static_cast<double>(uniform_rng() >> 11) * 0x1.0p-53;
      const auto t = std::chrono::steady_clock::now();
      const auto n_floats = static_cast<std::size_t>(n_seqs * c.vocab_size);
      const std::span<float> step_logits = std::span<float>(logits).first(n_floats);
      if (ending == Ending::Logits)
        model.forward(batch, kv, step_logits);
      else if (ending == Ending::GreedyIds)
        model.forward(batch, kv, step_logits, picked, greedy, u);
      else
        model.forward(batch, kv, step_logits, picked, temperature, u);
      return seconds_since(t);
    };
    auto run_decode = [&](bool graphs, Ending how = Ending::Logits) {
      be.set_step_graphs(graphs);
      ending = how;
      for (int i = 0; i < 8; ++i) batch_step(multi_ctx + i, 1);
      std::vector<double> t;
      for (std::int64_t i = 0; i < steps; ++i) t.push_back(batch_step(multi_ctx + 8 + i, 1));
      double sum = 0;
      for (double x : t) sum += x;
      return DecodeTime{median(t), sum / double(t.size())};
    };
    be.set_step_graphs(false);
    batch_step(0, multi_ctx);
    Multi m{n_seqs,
            run_decode(false),
            run_decode(true),
            run_decode(true, Ending::GreedyIds),
            run_decode(true, Ending::SampledIds),
            run_decode(true),
            run_decode(true, Ending::GreedyIds),
            run_decode(true, Ending::SampledIds),
            0};
    ending = Ending::Logits;
    // Per-op GPU time of these steps (eager, events around every op).
    model.set_ops(timer);
    timer.reset();
    for (int i = 0; i < 8; ++i) {
      batch_step(multi_ctx + 8 + steps + i, 1);
    }
    const std::string what = std::to_string(n_seqs) + "-sequence decode op (per step)";
    timer.print(what.c_str());
    for (const auto& [how, label] : {std::pair{Ending::GreedyIds, ", greedy ids picked on the GPU"},
                                     std::pair{Ending::SampledIds, ", ids drawn on the GPU (temperature 1)"}}) {
      ending = how;  // the same steps ending in sample_rows
      timer.reset();
      for (int i = 0; i < 8; ++i) {
        batch_step(multi_ctx + 8 + steps + i, 1);
      }
      timer.print((what + label).c_str());
    }
    ending = Ending::Logits;
    model.set_ops(be);
    const double kv_bytes = double(n_seqs) * double(multi_ctx + 8 + steps / 2) * double(kv_bytes_per_pos);
    m.bound_step_s = (double(model.decode_bytes()) + kv_bytes) / bw;
    be.set_step_graphs(true);
    return m;
  };
  auto print_multi = [&](const Multi& m) {
    for (const auto& [what, d] : {std::pair{"eager", m.eager}, std::pair{"graph", m.graph},
                                  std::pair{"graph, greedy ids", m.graph_ids},
                                  std::pair{"graph, sampled ids (temperature 1)", m.graph_sampled},
                                  std::pair{"graph (again)", m.graph_again},
                                  std::pair{"graph, greedy ids (again)", m.graph_ids_again},
                                  std::pair{"graph, sampled ids (temperature 1) (again)", m.graph_sampled_again}})
      std::printf("| %lld sequences decoding, context ~%lld, %s | %.0f tok/s (step %.3f ms; bound step %.3f ms) = "
                  "%.1f%% of bound |\n",
                  static_cast<long long>(m.n_seqs), static_cast<long long>(multi_ctx + 8 + steps / 2), what,
                  double(m.n_seqs) / d.median_s, d.median_s * 1e3, m.bound_step_s * 1e3,
                  100.0 * m.bound_step_s / d.median_s);
  };
  if (decode_only != 0) {
    const Multi d1 = multi(1), d8 = multi(8), d32 = multi(32);
    std::printf("\n| measurement | value |\n| --- | --- |\n");
    print_multi(d1);
    print_multi(d8);
    print_multi(d32);
    return 0;
  }

  // Prefill of `prefill` tokens from position 0 (one warm-up, median of 3).
  step(0, prefill);
  std::vector<double> pt;
  for (int i = 0; i < 3; ++i) pt.push_back(step(0, prefill));
  const double prefill_s = median(pt);

  // Cold time to first token: one prefill chunk from position 0 (warm-up, then median).
  auto measure_ttft = [&] {
    std::vector<std::pair<std::int64_t, double>> ttft;
    for (std::int64_t n = 1024; n <= ttft_max; n *= 2) {
      if (n == 2048) continue;
      step(0, n);
      std::vector<double> t;
      for (int i = 0; i < (n <= 8192 ? 3 : 2); ++i) t.push_back(step(0, n));
      ttft.push_back({n, median(t)});
    }
    return ttft;
  };
  auto print_ttft = [](const std::vector<std::pair<std::int64_t, double>>& ttft) {
    for (const auto& [n, t] : ttft)
      std::printf("| cold TTFT, %lld-token prompt (one chunk) | %.1f ms (%.0f tok/s) |\n", static_cast<long long>(n),
                  t * 1e3, double(n) / t);
  };
  if (prefill_only != 0) {
    model.set_ops(timer);
    step(0, prefill);
    timer.reset();  // the first pass is warm-up
    step(0, prefill);
    timer.print("prefill op (4K tokens)");
    model.set_ops(be);
    const auto ttft = measure_ttft();
    std::printf("\n| measurement | value |\n| --- | --- |\n");
    std::printf("| prefill %lld tokens | %.0f tok/s (%.1f ms) |\n", static_cast<long long>(prefill),
                double(prefill) / prefill_s, prefill_s * 1e3);
    print_ttft(ttft);
    return 0;
  }

  // Batch-1 decode after a prompt of `ctx` tokens: eager, then as graphs, from the same prompt.
  auto decode = [&](std::int64_t ctx, bool graphs) {
    be.set_step_graphs(graphs);
    step(0, ctx);
    for (int i = 0; i < 8; ++i) step(ctx + i, 1);
    std::vector<double> t;
    for (std::int64_t i = 0; i < steps; ++i) t.push_back(step(ctx + 8 + i, 1));
    double sum = 0;
    for (double x : t) sum += x;
    return DecodeTime{median(t), sum / double(t.size())};
  };
  const DecodeTime short_eager = decode(128, false), short_graph = decode(128, true);
  const DecodeTime short_eager2 = decode(128, false), short_graph2 = decode(128, true);
  const DecodeTime long_eager = decode(prefill, false), long_graph = decode(prefill, true);
  const CudaBackend::StepStats stats = be.step_stats();
  be.set_step_graphs(true);
  const double bound = bw / double(model.decode_bytes());
  const double long_bound = bw / double(model.decode_bytes() + (prefill + 8 + steps / 2) * kv_bytes_per_pos);

  // Per-op GPU time of decode steps (events around every op; context ~200; eager).
  model.set_ops(timer);
  for (int i = 0; i < 24; ++i) {
    step(200 + i, 1);
    if (i == 3) timer.reset();  // the first steps are warm-up
  }
  timer.print("decode op (per step)");

  // Per-op GPU time of one prefill (after a warm-up with the timer).
  timer.reset();
  step(0, prefill);
  timer.reset();
  step(0, prefill);
  timer.print("prefill op (4K tokens)");
  model.set_ops(be);

  const Multi m8 = multi(8), m32 = multi(32);

  const auto ttft = measure_ttft();

  std::printf("\n| measurement | value |\n| --- | --- |\n");
  std::printf("| device copy bandwidth (read + write) | %.0f GB/s |\n", bw * 1e-9);
  std::printf("| cuBLAS bf16 GEMM 8192^3 | %.0f TFLOP/s |\n", flops * 1e-12);
  std::printf("| weight bytes read per decode token | %.2f GB |\n", double(model.decode_bytes()) * 1e-9);
  std::printf("| decode bound (bandwidth / weight bytes) | %.1f tok/s |\n", bound);
  auto row = [&](const char* what, const DecodeTime& d, double b) {
    std::printf("| %s | %.1f tok/s (median step %.3f ms, mean %.3f ms) = %.1f%% of bound |\n", what, 1.0 / d.median_s,
                d.median_s * 1e3, d.mean_s * 1e3, 100.0 / d.median_s / b);
  };
  row("batch-1 decode, context 136, eager", short_eager, bound);
  row("batch-1 decode, context 136, graph", short_graph, bound);
  row("batch-1 decode, context 136, eager (again)", short_eager2, bound);
  row("batch-1 decode, context 136, graph (again)", short_graph2, bound);
  std::printf("| decode bound at context %lld (weights + KV) | %.1f tok/s |\n",
              static_cast<long long>(prefill + 8 + steps / 2), long_bound);
  row("batch-1 decode, long context, eager", long_eager, long_bound);
  row("batch-1 decode, long context, graph", long_graph, long_bound);
  std::printf("| recorded steps in batch-1 decode | %lld captured, %lld replayed, %lld eager |\n",
              static_cast<long long>(stats.captured), static_cast<long long>(stats.replayed),
              static_cast<long long>(stats.eager));
  print_multi(m8);
  print_multi(m32);
  std::printf("| prefill %lld tokens (tensor-core flash attention, cuBLAS bf16 GEMMs) | %.0f tok/s (%.1f ms) |\n",
              static_cast<long long>(prefill), double(prefill) / prefill_s, prefill_s * 1e3);
  const double prefill_flops = 2.0 * double(model.decode_bytes()) / 2.0 * double(prefill);
  std::printf("| prefill matmul rate (2 * params * tokens / time) | %.0f TFLOP/s |\n", prefill_flops / prefill_s * 1e-12);
  print_ttft(ttft);
  return 0;
}

}  // namespace
}  // namespace akv

int main(int argc, char** argv) { return akv::run(argc, argv); }
