// Kernels of hybrid models' linear-attention layers: the attention output gate (x *= sigmoid(g)),
// the short causal convolution with its per-sequence state (token by token for decode, in tiles
// of tokens in parallel for prefill), and the gated delta rule with the
// recurrent state held in registers (one block per sequence chunk and value head, one thread
// per value column, tokens in order: the decode update fused in one kernel; long prefill
// chunks take delta_rule_chunked.cu instead).
#include <algorithm>
#include <cmath>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/linear_attention.h"

namespace akv::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxConvRows = 8;
constexpr int kMaxKeyDim = 128;

// g_step 0: one gate per row (gate [n, 1]).
__global__ void sigmoid_mul_kernel(float* x, std::int64_t x_stride, const float* g,
                                   std::int64_t g_stride, std::int64_t g_step, std::int64_t cols) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t r = blockIdx.x, c = blockIdx.y * kThreads + threadIdx.x;
  if (c < cols) x[r * x_stride + c] *= 1.0f / (1.0f + expf(-g[r * g_stride + c * g_step]));
}

// One thread per (channel, sequence): the window of the last `rows` inputs stays in registers.
template <typename W>
__global__ void conv1d_kernel(float* x, std::int64_t x_stride, const W* w, float* state,
                              std::int64_t state_stride, int rows, std::int64_t channels,
                              const std::int32_t* seqs) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= channels) return;
  const std::int32_t* s = seqs + 4 * blockIdx.y;
  const std::int32_t first_row = s[0], n_tokens = s[1], start_pos = s[2], slot = s[3];
  const int taps = rows + 1;
  float win[kMaxConvRows];
#pragma unroll
  for (int r = 0; r < kMaxConvRows; ++r)
    win[r] = r < rows && start_pos > 0
                 ? state[(static_cast<std::int64_t>(slot) * rows + r) * state_stride + c]
                 : 0.0f;
  for (std::int32_t t = 0; t < n_tokens; ++t) {
    float* xp = x + static_cast<std::int64_t>(first_row + t) * x_stride + c;
    const float in = *xp;
    float acc = to_f32(w[c * taps + rows]) * in;
#pragma unroll
    for (int r = 0; r < kMaxConvRows; ++r)
      if (r < rows) acc += to_f32(w[c * taps + r]) * win[r];
#pragma unroll
    for (int r = 0; r + 1 < kMaxConvRows; ++r)
      if (r + 1 < rows) win[r] = win[r + 1];
    if (rows > 0) win[rows - 1] = in;
    *xp = acc / (1.0f + expf(-acc));
  }
#pragma unroll
  for (int r = 0; r < kMaxConvRows; ++r)
    if (r < rows) state[(static_cast<std::int64_t>(slot) * rows + r) * state_stride + c] = win[r];
}

// The tiled convolution (prefill): tile j of sequence i holds its tokens j T .. j T + T - 1
// (T = kConvTileTokens); its halo, the `rows` inputs before them, is slot halo_base(i) + j of the
// halo array. The slots of one launch number sum over its sequences of ceil(n_tokens / T).
__device__ __forceinline__ int halo_base(const std::int32_t* seqs, int seq) {
  int base = 0;
  for (int i = 0; i < seq; ++i) base += (seqs[4 * i + 1] + kConvTileTokens - 1) / kConvTileTokens;
  return base;
}

// Thread (channel, tile, sequence): copies the tile's halo [rows] of this channel from x (tiles
// after the first) or from the carried state (the first; zeros at position 0). Reads only, so
// the tile kernel after it may overwrite x and the state.
__global__ void conv1d_halo_kernel(const float* x, std::int64_t x_stride, const float* state,
                                   std::int64_t state_stride, int rows, std::int64_t channels,
                                   const std::int32_t* seqs, float* halo) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const std::int32_t* s = seqs + 4 * blockIdx.z;
  const std::int32_t first_row = s[0], n_tokens = s[1], start_pos = s[2], slot = s[3];
  const int j = static_cast<int>(blockIdx.y);
  if (c >= channels || j * kConvTileTokens >= n_tokens) return;
  float* h = halo + (static_cast<std::int64_t>(halo_base(seqs, blockIdx.z)) + j) * rows * channels + c;
  for (int r = 0; r < rows; ++r) {
    const int i = j * kConvTileTokens - rows + r;  // chunk index of the input (< 0: the state's)
    float v = 0.0f;
    if (i >= 0)
      v = x[static_cast<std::int64_t>(first_row + i) * x_stride + c];
    else if (start_pos > 0)
      v = state[(static_cast<std::int64_t>(slot) * rows + i + rows) * state_stride + c];
    h[static_cast<std::int64_t>(r) * channels] = v;
  }
}

// Thread (channel, tile, sequence): the tile's T inputs are read before any output is written
// (x in place), the window before them comes from the halo; the last tile writes the state.
// Window and weights by distance d back from the current token (wd[d], zero past `rows`), so
// every register index is a compile-time constant.
template <typename W>
__global__ void conv1d_tile_kernel(float* x, std::int64_t x_stride, const W* w, float* state,
                                   std::int64_t state_stride, int rows, std::int64_t channels,
                                   const std::int32_t* seqs, const float* halo) {
  constexpr int K = kMaxConvRows, T = kConvTileTokens;
  pdl_trigger();
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= channels) return;
  float wd[K + 1];
#pragma unroll
  for (int d = 0; d <= K; ++d) wd[d] = d <= rows ? to_f32(w[c * (rows + 1) + rows - d]) : 0.0f;
  pdl_wait();
  const std::int32_t* s = seqs + 4 * blockIdx.z;
  const std::int32_t first_row = s[0], n_tokens = s[1], slot = s[3];
  const int j = static_cast<int>(blockIdx.y), t0 = j * T;
  if (t0 >= n_tokens) return;
  const int nt = min(T, n_tokens - t0);
  // hist[K - d]: the input d tokens back (d = 1..K).
  const float* h = halo + (static_cast<std::int64_t>(halo_base(seqs, blockIdx.z)) + j) * rows * channels + c;
  float hist[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int r = k - (K - rows);
    hist[k] = r >= 0 ? h[static_cast<std::int64_t>(r) * channels] : 0.0f;
  }
  float* xp = x + static_cast<std::int64_t>(first_row + t0) * x_stride + c;
  float in[T];
#pragma unroll
  for (int u = 0; u < T; ++u) in[u] = u < nt ? xp[u * x_stride] : 0.0f;
#pragma unroll
  for (int u = 0; u < T; ++u) {
    if (u >= nt) break;
    float acc = wd[0] * in[u];
#pragma unroll
    for (int d = K; d >= 1; --d)  // oldest first, as the token-by-token kernel sums
      if (d <= rows) acc += wd[d] * hist[K - d];
#pragma unroll
    for (int k = 0; k + 1 < K; ++k) hist[k] = hist[k + 1];
    hist[K - 1] = in[u];
    xp[u * x_stride] = acc / (1.0f + expf(-acc));
  }
  if (t0 + nt < n_tokens) return;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int r = k - (K - rows);
    if (r >= 0) state[(static_cast<std::int64_t>(slot) * rows + r) * state_stride + c] = hist[k];
  }
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the total.
__device__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int i = 0; i < n_warps; ++i) total += scratch[i];
  return total;
}

struct DeltaRuleShape {
  int n_k_heads, n_v_heads, k_dim, v_dim;
};

template <typename W>
__global__ void delta_rule_kernel(const float* qkv, std::int64_t qkv_stride, const float* a,
                                  std::int64_t a_stride, const float* b, std::int64_t b_stride,
                                  const W* a_log, const W* dt_bias, float* state,
                                  const std::int32_t* seqs, DeltaRuleShape sh, float* out,
                                  std::int64_t out_stride) {
  pdl_trigger();
  pdl_wait();
  __shared__ float q_s[kMaxKeyDim], k_s[kMaxKeyDim], scratch[32];
  const int h = blockIdx.x, j = threadIdx.x;
  const std::int32_t* s = seqs + 4 * blockIdx.y;
  const std::int32_t first_row = s[0], n_tokens = s[1], start_pos = s[2], slot = s[3];
  const int kh = h / (sh.n_v_heads / sh.n_k_heads), dk = sh.k_dim, dv = sh.v_dim;
  float* S = state + (static_cast<std::int64_t>(slot) * sh.n_v_heads + h) * dk * dv;  // [dk, dv]
  const bool col = j < dv;
  float st[kMaxKeyDim];
#pragma unroll
  for (int i = 0; i < kMaxKeyDim; ++i)
    st[i] = col && i < dk && start_pos > 0 ? S[i * dv + j] : 0.0f;
  const float A = expf(to_f32(a_log[h])), bias = to_f32(dt_bias[h]);
  const float q_scale = rsqrtf(static_cast<float>(dk));
  const std::int64_t key_dim = static_cast<std::int64_t>(sh.n_k_heads) * dk;
  for (std::int32_t t = 0; t < n_tokens; ++t) {
    const std::int64_t row = first_row + t;
    const float* qr = qkv + row * qkv_stride + kh * dk;
    float qq = 0.0f, kk = 0.0f;
    for (int i = j; i < dk; i += blockDim.x) {
      q_s[i] = qr[i];
      k_s[i] = qr[key_dim + i];
      qq += q_s[i] * q_s[i];
      kk += k_s[i] * k_s[i];
    }
    const float q_inv = q_scale * rsqrtf(block_sum(qq, scratch) + 1e-6f);
    const float k_inv =
        rsqrtf(block_sum(kk, scratch) + 1e-6f);  // block_sum syncs: q_s, k_s are in place
    const float x = a[row * a_stride + h] + bias;
    const float g = -A * (x > 20.0f ? x : log1pf(expf(x)));
    const float beta = 1.0f / (1.0f + expf(-b[row * b_stride + h]));
    if (col) {
      const float v = qr[2 * key_dim - kh * dk + h * dv + j];
      const float decay = expf(g);
      float kv = 0.0f;
#pragma unroll
      for (int i = 0; i < kMaxKeyDim; ++i)
        if (i < dk) {
          st[i] *= decay;
          kv += st[i] * k_s[i] * k_inv;
        }
      const float delta = (v - kv) * beta;
      float o = 0.0f;
#pragma unroll
      for (int i = 0; i < kMaxKeyDim; ++i)
        if (i < dk) {
          st[i] += k_s[i] * k_inv * delta;
          o += st[i] * q_s[i] * q_inv;
        }
      out[row * out_stride + h * dv + j] = o;
    }
    __syncthreads();  // the next token overwrites q_s, k_s
  }
  if (col)
#pragma unroll
    for (int i = 0; i < kMaxKeyDim; ++i)
      if (i < dk) S[i * dv + j] = st[i];
}

}  // namespace

void launch_sigmoid_mul(TensorRef x, TensorRef gate, Stream s) {
  if (x.rows == 0) return;
  launch(sigmoid_mul_kernel, dim3(static_cast<unsigned>(x.rows), blocks_for(x.cols, kThreads)),
         kThreads, 0, s, static_cast<float*>(x.data), x.stride,
         static_cast<const float*>(gate.data), gate.stride, std::int64_t{gate.cols == 1 ? 0 : 1}, x.cols);
  AKV_CUDA_CHECK_LAUNCH();
}

void launch_causal_conv1d(TensorRef x, const WeightRef& w, TensorRef state, int rows,
                          const std::int32_t* seqs, int n_seqs, Stream s) {
  AKV_CHECK(rows >= 0 && rows <= kMaxConvRows, "causal_conv1d: at most 9 taps on the GPU");
  if (n_seqs == 0) return;
  const dim3 grid(blocks_for(x.cols, kThreads), static_cast<unsigned>(n_seqs));
  dispatch_float(w.dtype, [&](auto tag) {
    using W = decltype(tag);
    launch(conv1d_kernel<W>, grid, kThreads, 0, s, static_cast<float*>(x.data), x.stride,
           static_cast<const W*>(w.data), static_cast<float*>(state.data), state.stride, rows,
           x.cols, seqs);
  });
  AKV_CUDA_CHECK_LAUNCH();
}

std::size_t causal_conv1d_halo_bytes(std::int64_t n_tiles, int rows, std::int64_t channels) {
  return static_cast<std::size_t>(n_tiles * rows * channels) * sizeof(float);
}

void launch_causal_conv1d_tiled(TensorRef x, const WeightRef& w, TensorRef state, int rows,
                                const std::int32_t* seqs, int n_seqs, int max_tokens, float* halo,
                                Stream s) {
  AKV_CHECK(rows >= 0 && rows <= kMaxConvRows, "causal_conv1d: at most 9 taps on the GPU");
  AKV_CHECK(kConvTileTokens >= kMaxConvRows, "a tile's halo lies in the tile before it");
  if (n_seqs == 0 || max_tokens == 0) return;
  const dim3 grid(blocks_for(x.cols, kThreads), blocks_for(max_tokens, kConvTileTokens),
                  static_cast<unsigned>(n_seqs));
  AKV_CHECK(grid.y <= 65535 && grid.z <= 65535, "causal_conv1d: tiles per launch");
  if (rows > 0)
    launch(conv1d_halo_kernel, grid, kThreads, 0, s, static_cast<const float*>(x.data), x.stride,
           static_cast<const float*>(state.data), state.stride, rows, x.cols, seqs, halo);
  dispatch_float(w.dtype, [&](auto tag) {
    using W = decltype(tag);
    launch(conv1d_tile_kernel<W>, grid, kThreads, 0, s, static_cast<float*>(x.data), x.stride,
           static_cast<const W*>(w.data), static_cast<float*>(state.data), state.stride, rows,
           x.cols, seqs, static_cast<const float*>(halo));
  });
  AKV_CUDA_CHECK_LAUNCH();
}

void launch_gated_delta_rule(TensorRef qkv, TensorRef a, TensorRef b, const WeightRef& a_log,
                             const WeightRef& dt_bias, TensorRef state, const std::int32_t* seqs,
                             int n_seqs, int n_k_heads, int n_v_heads, int k_dim, int v_dim,
                             TensorRef out, Stream s) {
  AKV_CHECK(k_dim <= kMaxKeyDim && v_dim <= 1024,
            "gated_delta_rule: k_head_dim <= 128, v_head_dim <= 1024 on the GPU");
  AKV_CHECK(a_log.dtype == dt_bias.dtype, "gated_delta_rule: A_log and dt_bias of one dtype");
  AKV_CHECK(state.stride == v_dim, "gated_delta_rule: contiguous state");
  if (n_seqs == 0) return;
  const dim3 grid(static_cast<unsigned>(n_v_heads), static_cast<unsigned>(n_seqs));
  const unsigned threads = static_cast<unsigned>((std::max(v_dim, 32) + 31) / 32 * 32);
  const DeltaRuleShape shape{n_k_heads, n_v_heads, k_dim, v_dim};
  dispatch_float(a_log.dtype, [&](auto tag) {
    using W = decltype(tag);
    launch(delta_rule_kernel<W>, grid, threads, 0, s, static_cast<const float*>(qkv.data),
           qkv.stride, static_cast<const float*>(a.data), a.stride,
           static_cast<const float*>(b.data), b.stride, static_cast<const W*>(a_log.data),
           static_cast<const W*>(dt_bias.data), static_cast<float*>(state.data), seqs, shape,
           static_cast<float*>(out.data), out.stride);
  });
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
