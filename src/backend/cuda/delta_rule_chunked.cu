// The gated delta rule of prefill chunks in chunks of kDeltaChunkTokens tokens, the algebra of
// backend/cpu/delta_rule.h's delta_rule_chunked: a parallel pass over (chunk, value head) builds
// what does not depend on the state (the UT transform's triangular inverse and the masked,
// decayed q k^T; its products in f32 FMA or on the tensor cores), then one block per (value head,
// 32-column tile of the state) carries the state through the chunks in order with a few small
// matrix products per chunk: here in f32 FMA from shared memory, on the tensor cores in
// delta_rule_mma.cu. Decode keeps linear_attention.cu's token-by-token kernel.
#include <algorithm>
#include <cmath>

#include "backend/cuda/delta_rule_chunk.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/tf32_mma.cuh"

namespace akv::cuda {
namespace {

constexpr int kTile = kStateTile;  // state columns per block of the state pass (one per lane)
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxKeyDim = kChunkMaxKeyDim;
// The state pass: 16 warps (latency hiding: one block an SM), each thread column `lane`.
constexpr int kStateWarps = kStateThreads / 32;
constexpr int kRowsPerWarp = kC / kStateWarps;               // chunk rows of each warp
constexpr int kKeyRowsPerThread = kMaxKeyDim / kStateWarps;  // state rows each thread advances
constexpr int kLoadBatch = 16;  // global loads a thread issues before storing them
static_assert(kC % 32 == 0 && kC <= kThreads && kC % kStateWarps == 0, "chunk rows over the warps");
static_assert(kKeyRowsPerThread % 4 == 0, "state rows in float4 groups");
static_assert((2 * kC * kC / 4) % kStateThreads == 0 && (kC * kTile) % kStateThreads == 0,
              "whole load rounds");
static_assert(kC == 64 && kThreads == 256,
              "the prepare pass's thread maps: 16 x 16 threads of 4 x 4 entries, "
              "4 lanes per column");

// Shared floats of the prepare pass: q, k [kC][k_dim + 4] (rows k_dim + 1 apart for the FMA
// products, k_dim + 4 for the tensor cores'), A [kC][kAStride], T [kC][kTStride], beta, cum.
constexpr int kAStride = kC + 16, kTStride = kC + 8;
int prepare_smem_floats(int k_dim) {
  return 2 * kC * (k_dim + 4) + kC * (kAStride + kTStride) + 2 * kC;
}

// Grid (window_chunks, n_v_heads, n_seqs): one chunk of one value head. kMath: q k^T and k k^T in
// f32 FMA or on the tensor cores (3xTF32 or TF32, as the state pass; k_dim % 16 == 0 there).
template <typename W, DeltaChunkMath kMath>
__global__ void __launch_bounds__(kThreads)
    delta_chunk_prepare_kernel(ChunkedArgs p, const W* a_log, const W* dt_bias) {
  pdl_trigger();
  pdl_wait();
  extern __shared__ float4 smem_prepare[];
  float* sm = reinterpret_cast<float*>(smem_prepare);
  // Row strides for conflict-free access (see each phase): ks odd (FMA) or 4 mod 8 (fragments),
  // as kAStride (FMA) or 4 mod 8, ts 8 mod 32.
  constexpr bool kFma = kMath == DeltaChunkMath::Fma;
  const int dk = p.k_dim, ks = kFma ? dk + 1 : dk + 4, as = kFma ? kAStride : kC + 4, ts = kTStride;
  float* q_s = sm;                // [kC][ks] normalised q (scaled)
  float* k_s = q_s + kC * ks;     // [kC][ks] normalised k
  float* a_s = k_s + kC * ks;     // [kC][as] A, strictly lower
  float* t_s = a_s + kC * as;     // [kC][ts] (I + A)^-1
  float* beta_s = t_s + kC * ts;  // [kC]
  float* cum_s = beta_s + kC;     // [kC]
  const int h = blockIdx.y, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const std::int32_t* s = p.seqs + 4 * blockIdx.z;
  const int chunk = p.window_first + static_cast<int>(blockIdx.x), n_tokens = s[1];
  if (chunk * kC >= n_tokens) return;
  const int n = min(kC, n_tokens - chunk * kC);
  const std::int64_t row0 = static_cast<std::int64_t>(s[0]) + chunk * kC;
  const int kh = h / (p.n_v_heads / p.n_k_heads);
  const std::int64_t key_dim = static_cast<std::int64_t>(p.n_k_heads) * dk;
  float* out = chunk_scratch(p, static_cast<int>(blockIdx.z), static_cast<int>(blockIdx.x), h);

  // q, k rows: the raw values (kLoadBatch loads in flight per thread), then l2-normalised one
  // warp per row (the recurrent kernel's eps and scale).
  for (int e0 = tid; e0 < kC * dk; e0 += kThreads * kLoadBatch) {
    float qv[kLoadBatch], kv[kLoadBatch];
#pragma unroll
    for (int u = 0; u < kLoadBatch; ++u) {
      const int e = e0 + u * kThreads, i = e / dk;
      const bool ok = e < kC * dk && i < n;
      const float* r = p.qkv + (row0 + (ok ? i : 0)) * p.qkv_stride + kh * dk + (ok ? e % dk : 0);
      qv[u] = ok ? r[0] : 0.0f;
      kv[u] = ok ? r[key_dim] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kLoadBatch; ++u) {
      const int e = e0 + u * kThreads;
      if (e < kC * dk) {
        q_s[(e / dk) * ks + e % dk] = qv[u];
        k_s[(e / dk) * ks + e % dk] = kv[u];
      }
    }
  }
  __syncthreads();
  const float q_scale = rsqrtf(static_cast<float>(dk));
  for (int i = warp; i < kC; i += kWarps) {
    float qq = 0.0f, kk = 0.0f;
    for (int c = lane; c < dk; c += 32) {
      qq += q_s[i * ks + c] * q_s[i * ks + c];
      kk += k_s[i * ks + c] * k_s[i * ks + c];
    }
    const float qinv = q_scale * rsqrtf(warp_sum(qq) + 1e-6f), kinv = rsqrtf(warp_sum(kk) + 1e-6f);
    for (int c = lane; c < dk; c += 32) {
      q_s[i * ks + c] *= qinv;
      k_s[i * ks + c] *= kinv;
    }
    if (lane == 0) {
      out[kQinv + i] = qinv;
      out[kKinv + i] = kinv;
    }
  }
  // Log decay g and write strength beta per token; zero past the chunk's end.
  if (tid < kC) {
    float g = 0.0f, beta = 0.0f;
    if (tid < n) {
      const std::int64_t row = row0 + tid;
      const float x = p.a[row * p.a_stride + h] + to_f32(dt_bias[h]);
      g = -expf(to_f32(a_log[h])) * (x > 20.0f ? x : log1pf(expf(x)));
      beta = 1.0f / (1.0f + expf(-p.b[row * p.b_stride + h]));
    }
    cum_s[tid] = g;
    beta_s[tid] = beta;
  }
  __syncthreads();
  if (tid == 0) {
    float acc = 0.0f;
    for (int i = 0; i < kC; ++i) cum_s[i] = acc += cum_s[i];
  }
  __syncthreads();

  if constexpr (kMath == DeltaChunkMath::Fma) {
    // A into shared memory, p straight to scratch: thread t computes rows t / 16 + 16 y and
    // columns t % 16 + 16 x (x, y < 4), 12 shared loads for 32 FMAs; a warp reads 2 rows i (two
    // addresses) and 16 rows j (odd stride: distinct banks) at once.
    {
      const int ti = tid / 16, tj = tid % 16;
      float kk[4][4] = {}, qk[4][4] = {};
      for (int c = 0; c < dk; ++c) {
        float ki[4], qi[4], kj[4];
#pragma unroll
        for (int y = 0; y < 4; ++y) {
          ki[y] = k_s[(ti + 16 * y) * ks + c];
          qi[y] = q_s[(ti + 16 * y) * ks + c];
          kj[y] = k_s[(tj + 16 * y) * ks + c];
        }
#pragma unroll
        for (int y = 0; y < 4; ++y)
#pragma unroll
          for (int x = 0; x < 4; ++x) {
            kk[y][x] += ki[y] * kj[x];
            qk[y][x] += qi[y] * kj[x];
          }
      }
#pragma unroll
      for (int y = 0; y < 4; ++y)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const int i = ti + 16 * y, j = tj + 16 * x;
          const float decay = j <= i ? expf(cum_s[i] - cum_s[j]) : 0.0f;  // <= 1: cum falls
          a_s[i * as + j] = j < i ? beta_s[i] * decay * kk[y][x] : 0.0f;
          out[kP + i * kC + j] = decay * qk[y][x];
        }
    }
  } else {
    // The same entries on the tensor cores: warp w takes m16 tile w % 4 of the rows i of K K^T
    // (w < 4: A) or Q K^T (w >= 4: p), and the n8 tiles of columns j up to the tile's diagonal.
    constexpr bool kSplit = kMath == DeltaChunkMath::Tf32x3;
    const int g = lane / 4, t = lane % 4, m = warp % 4, n_tiles = 2 * m + 2;
    const bool qk_warp = warp >= 4;
    const float* a_rows = (qk_warp ? q_s : k_s) + 16 * m * ks;
    float acc[8][4] = {};
    for (int k0 = 0; k0 < dk; k0 += 8) {
      const Tf32Frag<4, kSplit> a = load_a<kSplit>(a_rows + k0, ks, g, t);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
        if (nt < n_tiles)
          mma_frag<kSplit>(acc[nt], a, load_b_transposed<kSplit>(k_s + 8 * nt * ks + k0, ks, g, t));
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int i = 16 * m + g + 8 * (x / 2), j = 8 * nt + 2 * t + x % 2;
        const float decay = j <= i ? expf(cum_s[i] - cum_s[j]) : 0.0f;  // <= 1: cum falls
        if (qk_warp)
          out[kP + i * kC + j] = decay * acc[nt][x];
        else
          a_s[i * as + j] = j < i ? beta_s[i] * decay * acc[nt][x] : 0.0f;
      }
  }
  __syncthreads();

  if constexpr (kFma) {
    // T = (I + A)^-1 by forward substitution, row by row, four lanes per column c (part q sums
    // over j = q mod 4; T[j][c] = 0 for j < c): T[i][c] = [i == c] - sum_{j < i} A[i][j] T[j][c].
    // A column's four lanes share a warp, so a warp barrier orders its rows.
    const int c = tid / 4, part = tid % 4;
    for (int i = 0; i < kC; ++i) {
      const float* ai = a_s + i * as;
      float sum = 0.0f;
      for (int j = part; j < i; j += 4) sum += ai[j] * t_s[j * ts + c];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      if (part == 0) t_s[i * ts + c] = i < c ? 0.0f : (i == c ? 1.0f : 0.0f) - sum;
      __syncwarp();
    }
  } else {
    // T = (I + A)^-1 in 16 x 16 blocks: the diagonal blocks T_ii by the same forward
    // substitution within each (16 rows, not 64), then the blocks below them one diagonal at a
    // time on the tensor cores, T_ij = -T_ii X with X = sum_{j <= k < i} A_ik T_kj (blocks of
    // earlier diagonals). X goes to A's upper triangle at block (j, i), which nothing reads.
    constexpr bool kSplit = kMath == DeltaChunkMath::Tf32x3;
    static_assert(kC == 64, "4 x 4 blocks of 16");
    {
      const int c = tid / 4, part = tid % 4, b0 = 16 * (c / 16);
      for (int i = part; i < b0; i += 4) t_s[i * ts + c] = 0.0f;
      for (int i = b0; i < b0 + 16; ++i) {
        const float* ai = a_s + i * as;
        float sum = 0.0f;
        for (int j = b0 + part; j < i; j += 4) sum += ai[j] * t_s[j * ts + c];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        if (part == 0) t_s[i * ts + c] = i < c ? 0.0f : (i == c ? 1.0f : 0.0f) - sum;
        __syncwarp();
      }
    }
    __syncthreads();
    const int g = lane / 4, t = lane % 4;
    for (int d = 1; d < 4; ++d) {  // block diagonal d: (i, i - d), one warp per n8 tile
      if (warp < 2 * (4 - d)) {
        const int i = d + warp / 2, j = i - d, nt = warp % 2;
        float x[4] = {}, y[4] = {};
        for (int k0 = 16 * j; k0 < 16 * i; k0 += 8)
          mma_frag<kSplit>(x, load_a<kSplit>(a_s + 16 * i * as + k0, as, g, t),
                           load_b<kSplit>(t_s + k0 * ts + 16 * j + 8 * nt, ts, g, t));
        float* xs = a_s + 16 * j * as + 16 * i + 8 * nt;  // [16][8] of X at row stride as
#pragma unroll
        for (int e = 0; e < 4; ++e) xs[(g + 8 * (e / 2)) * as + 2 * t + e % 2] = x[e];
        __syncwarp();
        for (int k0 = 0; k0 < 16; k0 += 8)
          mma_frag<kSplit>(y, load_a<kSplit>(t_s + 16 * i * ts + 16 * i + k0, ts, g, t),
                           load_b<kSplit>(xs + k0 * as, as, g, t));
#pragma unroll
        for (int e = 0; e < 4; ++e)
          t_s[(16 * i + g + 8 * (e / 2)) * ts + 16 * j + 8 * nt + 2 * t + e % 2] = -y[e];
      }
      __syncthreads();
    }
  }
  __syncthreads();
  for (int e = tid; e < kC * kC; e += kThreads) out[kT + e] = t_s[(e / kC) * ts + e % kC];
  if (tid < kC) {
    out[kBeta + tid] = beta_s[tid];
    out[kCum + tid] = cum_s[tid];
  }
}

// Shared floats of the state pass: S [k_dim][kTile], q, k [kC][k_dim], t, p [kC][kC],
// R and U [kC][kTile], and three per-token vectors.
int state_smem_floats(int k_dim) {
  return k_dim * kTile + 2 * kC * k_dim + 2 * kC * kC + 2 * kC * kTile + 3 * kC;
}

// Grid (n_v_heads, column tiles, n_seqs): columns [tile * kTile, +kTile) of one value head's
// state through the window's chunks in order. Thread (warp w, lane l) owns column l, chunk rows
// w + kWarps r and state rows 32 r + 4 w + {0..3}. Needs k_dim % 4 == 0 (float4 rows).
__global__ void __launch_bounds__(kStateThreads) delta_chunk_state_kernel(ChunkedArgs p) {
  pdl_trigger();
  pdl_wait();
  extern __shared__ float4 smem_state[];  // 16-byte aligned: float4 rows
  float* sm = reinterpret_cast<float*>(smem_state);
  const int dk = p.k_dim, dv = p.v_dim;
  float* S = sm;                   // [dk][kTile] the state's columns
  float* k_s = S + dk * kTile;     // [kC][dk] normalised k
  float* q_s = k_s + kC * dk;      // [kC][dk] normalised, scaled q
  float* t_s = q_s + kC * dk;      // [kC][kC]
  float* p_s = t_s + kC * kC;      // [kC][kC]
  float* r_s = p_s + kC * kC;      // [kC][kTile] v, then R
  float* u_s = r_s + kC * kTile;   // [kC][kTile] U = t R
  float* ecum = u_s + kC * kTile;  // [kC] e^cum_i
  float* kdec = ecum + kC;         // [kC] e^(cum_last - cum_j)
  float* beta = kdec + kC;         // [kC]
  const int h = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32, tid = threadIdx.x;
  const int col = static_cast<int>(blockIdx.y) * kTile + lane;
  const bool col_ok = col < dv;
  const std::int32_t* s = p.seqs + 4 * blockIdx.z;
  const std::int32_t first_row = s[0], n_tokens = s[1], start_pos = s[2], slot = s[3];
  const int kh = h / (p.n_v_heads / p.n_k_heads);
  const std::int64_t key_dim = static_cast<std::int64_t>(p.n_k_heads) * dk;
  float* state =
      p.state + (static_cast<std::int64_t>(slot) * p.n_v_heads + h) * dk * dv;  // [dk, dv]
  const bool fresh = p.window_first == 0 && start_pos == 0;
  for (int e = tid; e < dk * kTile; e += kStateThreads) {
    const int row = e / kTile, c = static_cast<int>(blockIdx.y) * kTile + e % kTile;
    S[e] = !fresh && c < dv ? state[row * dv + c] : 0.0f;
  }
  const int n_chunks = (n_tokens + kC - 1) / kC;
  const int last = min(p.window_first + p.window_chunks, n_chunks);
  for (int chunk = p.window_first; chunk < last; ++chunk) {
    const int n = min(kC, n_tokens - chunk * kC);
    const std::int64_t row0 = static_cast<std::int64_t>(first_row) + chunk * kC;
    const float* f = chunk_scratch(p, static_cast<int>(blockIdx.z), chunk - p.window_first, h);
    __syncthreads();  // the previous chunk's readers are done; S is initialised
    // Load: q, k normalised; t, p; v's columns; the per-token decays. Each thread's loads go
    // out in batches before their stores (one round trip per batch, not per element).
    for (int e0 = tid; e0 < kC * dk; e0 += kStateThreads * kLoadBatch) {
      float qv[kLoadBatch], kv[kLoadBatch];
#pragma unroll
      for (int u = 0; u < kLoadBatch; ++u) {
        const int e = e0 + u * kStateThreads, i = e / dk;
        const bool ok = e < kC * dk && i < n;
        const float* r = p.qkv + (row0 + (ok ? i : 0)) * p.qkv_stride + kh * dk + (ok ? e % dk : 0);
        qv[u] = ok ? r[0] * f[kQinv + i] : 0.0f;
        kv[u] = ok ? r[key_dim] * f[kKinv + i] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kLoadBatch; ++u) {
        const int e = e0 + u * kStateThreads;
        if (e < kC * dk) {
          q_s[e] = qv[u];
          k_s[e] = kv[u];
        }
      }
    }
    {
      constexpr int kVecs = 2 * kC * kC / 4 / kStateThreads, kCols = kC * kTile / kStateThreads;
      float4 tp[kVecs];
      float vv[kCols];
#pragma unroll
      for (int u = 0; u < kVecs; ++u)
        tp[u] = reinterpret_cast<const float4*>(f + kT)[tid + u * kStateThreads];
#pragma unroll
      for (int u = 0; u < kCols; ++u) {
        const int e = tid + u * kStateThreads, i = e / kTile;
        const int c = static_cast<int>(blockIdx.y) * kTile + e % kTile;
        const bool ok = i < n && c < dv;
        vv[u] = ok ? p.qkv[(row0 + i) * p.qkv_stride + 2 * key_dim + h * dv + c] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kVecs; ++u)
        reinterpret_cast<float4*>(t_s)[tid + u * kStateThreads] = tp[u];
#pragma unroll
      for (int u = 0; u < kCols; ++u) r_s[tid + u * kStateThreads] = vv[u];
    }
    const float cum_last = f[kCum + n - 1];
    if (tid < kC) {
      ecum[tid] = expf(f[kCum + tid]);
      kdec[tid] = tid < n ? expf(cum_last - f[kCum + tid]) : 0.0f;
      beta[tid] = f[kBeta + tid];
    }
    __syncthreads();

    // R_i = beta_i (v_i - e^cum_i S^T k_i); q_i^T S kept for the outputs.
    float ks[kRowsPerWarp] = {}, qs[kRowsPerWarp] = {};
    for (int a = 0; a < dk; a += 4) {
      const float s0 = S[a * kTile + lane], s1 = S[(a + 1) * kTile + lane],
                  s2 = S[(a + 2) * kTile + lane], s3 = S[(a + 3) * kTile + lane];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const int i = warp + kStateWarps * r;
        const float4 kv = *reinterpret_cast<const float4*>(k_s + i * dk + a);
        const float4 qv = *reinterpret_cast<const float4*>(q_s + i * dk + a);
        ks[r] += kv.x * s0 + kv.y * s1 + kv.z * s2 + kv.w * s3;
        qs[r] += qv.x * s0 + qv.y * s1 + qv.z * s2 + qv.w * s3;
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int i = warp + kStateWarps * r;
      r_s[i * kTile + lane] = beta[i] * (r_s[i * kTile + lane] - ecum[i] * ks[r]);
    }
    __syncthreads();

    // U = t R (t lower: j <= i).
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int i = warp + kStateWarps * r;
      float acc = 0.0f;
      for (int j = 0; j <= i; j += 4) {
        const float4 tv = *reinterpret_cast<const float4*>(t_s + i * kC + j);
        acc += tv.x * r_s[j * kTile + lane] + tv.y * r_s[(j + 1) * kTile + lane] +
               tv.z * r_s[(j + 2) * kTile + lane] + tv.w * r_s[(j + 3) * kTile + lane];
      }
      u_s[i * kTile + lane] = acc;
    }
    __syncthreads();

    // o_i = e^cum_i q_i^T S + sum_{j <= i} p[i][j] U_j (p is zero above the diagonal).
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int i = warp + kStateWarps * r;
      float acc = ecum[i] * qs[r];
      for (int j = 0; j <= i; j += 4) {
        const float4 pv = *reinterpret_cast<const float4*>(p_s + i * kC + j);
        acc += pv.x * u_s[j * kTile + lane] + pv.y * u_s[(j + 1) * kTile + lane] +
               pv.z * u_s[(j + 2) * kTile + lane] + pv.w * u_s[(j + 3) * kTile + lane];
      }
      if (i < n && col_ok) p.out[(row0 + i) * p.out_stride + h * dv + col] = acc;
    }
    // S = e^cum_last S + sum_j e^(cum_last - cum_j) k_j U_j^T over this thread's state rows.
    const float g_last = expf(cum_last);
    float acc[kKeyRowsPerThread];
#pragma unroll
    for (int r = 0; r < kKeyRowsPerThread / 4; ++r)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int a = 4 * kStateWarps * r + 4 * warp + x;
        acc[4 * r + x] = a < dk ? g_last * S[a * kTile + lane] : 0.0f;
      }
    for (int j = 0; j < n; ++j) {
      const float u = kdec[j] * u_s[j * kTile + lane];
#pragma unroll
      for (int r = 0; r < kKeyRowsPerThread / 4; ++r) {
        const int a = 4 * kStateWarps * r + 4 * warp;
        if (a < dk) {
          const float4 kv = *reinterpret_cast<const float4*>(k_s + j * dk + a);
          acc[4 * r] += kv.x * u;
          acc[4 * r + 1] += kv.y * u;
          acc[4 * r + 2] += kv.z * u;
          acc[4 * r + 3] += kv.w * u;
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kKeyRowsPerThread / 4; ++r)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const int a = 4 * kStateWarps * r + 4 * warp + x;
        if (a < dk) S[a * kTile + lane] = acc[4 * r + x];
      }
  }
  __syncthreads();
  for (int e = tid; e < dk * kTile; e += kStateThreads) {
    const int row = e / kTile, c = static_cast<int>(blockIdx.y) * kTile + e % kTile;
    if (c < dv) state[row * dv + c] = S[e];
  }
}

constexpr std::size_t kScratchBudgetBytes = std::size_t{64} << 20;

int chunks_of(int tokens) {
  return (tokens + kC - 1) / kC;
}

std::size_t window_chunk_bytes(int n_seqs, int n_v_heads) {
  return static_cast<std::size_t>(n_seqs) * static_cast<std::size_t>(n_v_heads) * kChunkFloats *
         sizeof(float);
}

}  // namespace

bool delta_rule_chunked_fits(int k_dim, int v_dim) {
  return k_dim > 0 && k_dim <= kMaxKeyDim && k_dim % 4 == 0 && v_dim > 0;
}

std::size_t delta_rule_chunked_scratch_bytes(int n_seqs, int max_tokens, int n_v_heads) {
  const std::size_t per_chunk = window_chunk_bytes(n_seqs, n_v_heads);
  const std::size_t chunks = static_cast<std::size_t>(std::max(1, chunks_of(max_tokens)));
  return std::max(per_chunk,
                  std::min(chunks * per_chunk, kScratchBudgetBytes / per_chunk * per_chunk));
}

void launch_gated_delta_rule_chunked(TensorRef qkv, TensorRef a, TensorRef b,
                                     const WeightRef& a_log, const WeightRef& dt_bias,
                                     TensorRef state, const std::int32_t* seqs, int n_seqs,
                                     int max_tokens, int n_k_heads, int n_v_heads, int k_dim,
                                     int v_dim, TensorRef out, void* scratch,
                                     std::size_t scratch_bytes, DeltaChunkMath math, Stream s,
                                     DeltaChunkLaunches launches) {
  AKV_CHECK(delta_rule_chunked_fits(k_dim, v_dim),
            "gated_delta_rule chunked: k_head_dim a multiple of 4, <= 128");
  AKV_CHECK(a_log.dtype == dt_bias.dtype, "gated_delta_rule: A_log and dt_bias of one dtype");
  AKV_CHECK(state.stride == v_dim, "gated_delta_rule: contiguous state");
  AKV_CHECK(n_k_heads > 0 && n_v_heads % n_k_heads == 0,
            "gated_delta_rule: value heads per key head");
  if (n_seqs == 0 || max_tokens <= 0) return;
  const std::size_t per_chunk = window_chunk_bytes(n_seqs, n_v_heads);
  AKV_CHECK(scratch_bytes >= per_chunk, "gated_delta_rule chunked: scratch for one chunk");
  const int n_chunks = chunks_of(max_tokens);
  const int window = static_cast<int>(
      std::min<std::size_t>(static_cast<std::size_t>(n_chunks), scratch_bytes / per_chunk));
  const std::size_t prepare_smem =
      sizeof(float) * static_cast<std::size_t>(prepare_smem_floats(k_dim));
  const std::size_t state_smem = sizeof(float) * static_cast<std::size_t>(state_smem_floats(k_dim));
  static bool attributes_set = false;  // the engine thread is the only caller; sized for k_dim 128
  if (!attributes_set) {
    const int most = static_cast<int>(sizeof(float)) *
                     std::max(prepare_smem_floats(kMaxKeyDim), state_smem_floats(kMaxKeyDim));
    const auto set = [most](auto kernel) {
      AKV_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most));
    };
    for (const DType t : {DType::F32, DType::BF16, DType::F16})
      dispatch_float(t, [&](auto tag) {
        using W = decltype(tag);
        set(delta_chunk_prepare_kernel<W, DeltaChunkMath::Fma>);
        set(delta_chunk_prepare_kernel<W, DeltaChunkMath::Tf32x3>);
        set(delta_chunk_prepare_kernel<W, DeltaChunkMath::Tf32>);
      });
    set(delta_chunk_state_kernel);
    attributes_set = true;
  }
  ChunkedArgs p{.qkv = static_cast<const float*>(qkv.data),
                .qkv_stride = qkv.stride,
                .a = static_cast<const float*>(a.data),
                .a_stride = a.stride,
                .b = static_cast<const float*>(b.data),
                .b_stride = b.stride,
                .state = static_cast<float*>(state.data),
                .seqs = seqs,
                .n_k_heads = n_k_heads,
                .n_v_heads = n_v_heads,
                .k_dim = k_dim,
                .v_dim = v_dim,
                .out = static_cast<float*>(out.data),
                .out_stride = out.stride,
                .scratch = static_cast<float*>(scratch),
                .window_first = 0,
                .window_chunks = window};
  const bool tensor_cores = math != DeltaChunkMath::Fma && delta_rule_chunk_mma_fits(k_dim, v_dim);
  const DeltaChunkMath used = tensor_cores ? math : DeltaChunkMath::Fma;
  const dim3 state_grid(static_cast<unsigned>(n_v_heads), blocks_for(v_dim, kTile),
                        static_cast<unsigned>(n_seqs));
  for (int first = 0; first < n_chunks; first += window) {
    p.window_first = first;
    if (launches != DeltaChunkLaunches::StateOnly) {
      dispatch_float(a_log.dtype, [&](auto tag) {
        using W = decltype(tag);
        const auto kernel =
            used == DeltaChunkMath::Fma      ? delta_chunk_prepare_kernel<W, DeltaChunkMath::Fma>
            : used == DeltaChunkMath::Tf32x3 ? delta_chunk_prepare_kernel<W, DeltaChunkMath::Tf32x3>
                                             : delta_chunk_prepare_kernel<W, DeltaChunkMath::Tf32>;
        launch(kernel,
               dim3(static_cast<unsigned>(window), static_cast<unsigned>(n_v_heads),
                    static_cast<unsigned>(n_seqs)),
               kThreads, prepare_smem, s, p, static_cast<const W*>(a_log.data),
               static_cast<const W*>(dt_bias.data));
      });
      AKV_CUDA_CHECK_LAUNCH();
    }
    if (launches == DeltaChunkLaunches::PrepareOnly) continue;
    if (tensor_cores) {
      launch_delta_chunk_state_mma(p, state_grid, math == DeltaChunkMath::Tf32x3, s);
    } else {
      launch(delta_chunk_state_kernel, state_grid, kStateThreads, state_smem, s, p);
      AKV_CUDA_CHECK_LAUNCH();
    }
  }
}

}  // namespace akv::cuda
