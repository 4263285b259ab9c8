// The state pass of the chunked delta rule (delta_rule_chunked.cu) on the tensor cores: the same
// blocks, scratch and algebra as the f32 FMA state pass, with each chunk's matrix products
// through mma.sync m16n8k8 tf32 (f32 accumulators). The state stays f32 in shared memory between
// chunks. 3xTF32 (`kSplit`): each f32 operand x = big + small, both tf32 (11 significant bits
// each), and a product is small*big + big*small + big*big (the dropped small*small is ~2^-22 of
// it): near-f32 error. Without the split one tf32 product (~2^-11 relative per operand).
#include <cstdint>

#include "backend/cuda/delta_rule_chunk.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/tf32_mma.cuh"

namespace akv::cuda {
namespace {

constexpr int kWarps = kStateThreads / 32;  // 16
// Shared row strides (floats) for conflict-free fragment loads: an A operand read row-major
// (rows by lane / 4, columns by lane % 4) needs a stride of 4 mod 8 words; a B operand [k][n]
// (k by lane % 4, n by lane / 4) one of 8 mod 32.
constexpr int kSStride = kStateTile + 8;   // S [k_dim][kSStride]: B of K S and Q S
constexpr int kTPStride = kC + 4;          // t, p [kC][kTPStride]: A of t R and p U
constexpr int kRUStride = kStateTile + 8;  // R, U [kC][kRUStride]: B of t R, p U, K^T U
constexpr int qk_stride(int k_dim) {
  return k_dim + 4;
}  // q, k [kC][k_dim + 4]: A of K S, Q S
static_assert(kC == 64 && kStateTile == 32 && kWarps == 16,
              "the warp maps below: 8 m16 tiles of [K; Q] x 4 n8 tiles of the columns");

// Asynchronous copies of 16 (or 4) bytes; `ok` false fills zeros (rows past a chunk's end,
// columns past v_dim) without reading `src` (which must still be a valid address).
__device__ __forceinline__ void cp_async16_or_zero(void* dst, const void* src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src),
               "r"(ok ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async4_or_zero(void* dst, const void* src, bool ok) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_addr(dst)), "l"(src),
               "r"(ok ? 4 : 0)
               : "memory");
}

// One chunk's place in the batch as the state pass's block sees it.
struct ChunkAt {
  const float* f;     // its scratch (kChunkFloats)
  std::int64_t row0;  // its first row of qkv / out
  int n;              // its tokens (<= kC)
};

// The shared-memory arrays of one block (floats; every array starts 16-byte aligned).
struct StateSmem {
  float* S;       // [dk][kSStride] the state's columns
  float* qk;      // 2 buffers of [2][kC][ldk]: raw q rows, then raw k rows
  float* t;       // [kC][kTPStride]
  float* p;       // [kC][kTPStride]
  float* r;       // [kC][kRUStride] v, then R
  float* u;       // [kC][kRUStride] U = t R
  float* vec;     // 2 buffers of [4 * kC]: kinv, qinv, beta, cum as in scratch
  float* rscale;  // [kC] e^cum_i kinv_i       (K S of the raw k rows -> of the normalised)
  float* qscale;  // [kC] e^cum_i qinv_i       (likewise for Q S, with e^cum_i)
  float* kscale;  // [kC] e^(cum_last - cum_j) kinv_j, 0 past the chunk
  float* beta;    // [kC]
};

int smem_floats_async(int k_dim) {
  return k_dim * kSStride + 4 * kC * qk_stride(k_dim) + 2 * kC * kTPStride + 2 * kC * kRUStride +
         8 * kC + 4 * kC;
}

// Issues the copies of a chunk's raw q and k rows into qk (all threads; warp w rows w, w + 16,
// .., lanes along a row: no divisions). `vec16`: qkv's rows and columns are 16-byte aligned.
__device__ __forceinline__ void issue_qk(const ChunkedArgs& p, const ChunkAt& c, int kh, float* qk,
                                         bool vec16) {
  const int dk = p.k_dim, ldk = qk_stride(dk), lane = threadIdx.x % 32;
  const std::int64_t key_dim = static_cast<std::int64_t>(p.n_k_heads) * dk;
  for (int row = threadIdx.x / 32; row < 2 * kC; row += kWarps) {  // q rows, then k rows
    const int i = row % kC;
    const bool ok = i < c.n;
    const float* src = p.qkv + (c.row0 + (ok ? i : 0)) * p.qkv_stride + (row / kC) * key_dim +
                       static_cast<std::int64_t>(kh) * dk;
    float* dst = qk + row * ldk;
    if (vec16) {
      if (4 * lane < dk) cp_async16_or_zero(dst + 4 * lane, src + 4 * lane, ok);
    } else {
      for (int col = lane; col < dk; col += 32) cp_async4_or_zero(dst + col, src + col, ok);
    }
  }
}

// kinv, qinv, beta, cum of a chunk (contiguous in scratch): 64 copies of 16 bytes.
__device__ __forceinline__ void issue_vec(const ChunkAt& c, float* vec) {
  if (threadIdx.x < kC) cp_async16(vec + 4 * threadIdx.x, c.f + kKinv + 4 * threadIdx.x);
}

// A [kC][kC] matrix of scratch (t or p) into a [kC][kTPStride] array.
__device__ __forceinline__ void issue_square(const float* src, float* dst) {
  for (int e = threadIdx.x; e < kC * kC / 4; e += kStateThreads) {
    const int i = e / (kC / 4), col = 4 * (e % (kC / 4));
    cp_async16(dst + i * kTPStride + col, src + i * kC + col);
  }
}

// The chunk's v columns [col0, col0 + 32) of value head h into r (zeros past the chunk, past
// v_dim): 16-byte copies of 8 lanes a row (4 rows a warp), or 4-byte copies of a row a warp.
__device__ __forceinline__ void issue_v(const ChunkedArgs& p, const ChunkAt& c, int h, int col0,
                                        float* r, bool vec16) {
  const std::int64_t v0 =
      2 * static_cast<std::int64_t>(p.n_k_heads) * p.k_dim + static_cast<std::int64_t>(h) * p.v_dim;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int col = vec16 ? 4 * (lane % 8) : lane, row_step = vec16 ? 4 : 1;
  for (int i = vec16 ? 4 * warp + lane / 8 : warp; i < kC; i += kWarps * row_step) {
    const bool ok = i < c.n && col0 + col < p.v_dim;
    const float* src = p.qkv + (c.row0 + (ok ? i : 0)) * p.qkv_stride + v0 + (ok ? col0 + col : 0);
    if (vec16)
      cp_async16_or_zero(r + i * kRUStride + col, src, ok);
    else
      cp_async4_or_zero(r + i * kRUStride + col, src, ok);
  }
}

// Grid (n_v_heads, column tiles, n_seqs), 16 warps: columns [tile * 32, +32) of one value head's
// state through the window's chunks in order (delta_rule_chunked.cu's state pass, the same
// products). Per chunk, with [K; Q] the chunk's raw key and query rows (each product's rows
// scaled by the l2 normalisations afterwards):
//   1. [K; Q] S      all 16 warps: m16 tile w % 8 of [K; Q], n8 tiles 2 (w / 8) and + 1
//   2. R = beta (v - e^cum K S) in the K warps' registers, into shared memory
//   3. U = t R       all 16 warps: m16 tile w % 4, n8 tile w / 4 (t lower: k-steps to the diagonal)
//   4. o = e^cum Q S + p U   the Q warps (their Q S accumulators), written to `out`
//   5. S = e^cum_last S + K^T diag(e^(cum_last - cum)) U   the K warps at once: m16 tiles of S
// Copies run ahead with cp.async: the next chunk's q, k and per-token vectors (double-buffered)
// during the whole chunk, its t and v during steps 4-5, this chunk's p during steps 1-2.
// Needs k_dim % 16 == 0 (whole m16 tiles of S, k8 steps of K S).
template <bool kSplit>
__global__ void __launch_bounds__(kStateThreads)
    delta_chunk_state_mma_kernel(ChunkedArgs p, bool vec16) {
  pdl_trigger();
  pdl_wait();
  extern __shared__ float4 smem_mma[];
  const int dk = p.k_dim, dv = p.v_dim, ldk = qk_stride(dk);
  StateSmem sm;
  {
    float* at = reinterpret_cast<float*>(smem_mma);
    const auto take = [&at](int n_floats) {
      float* r = at;
      at += n_floats;
      return r;
    };
    sm.S = take(dk * kSStride);
    sm.qk = take(4 * kC * ldk);
    sm.t = take(kC * kTPStride);
    sm.p = take(kC * kTPStride);
    sm.r = take(kC * kRUStride);
    sm.u = take(kC * kRUStride);
    sm.vec = take(8 * kC);
    sm.rscale = take(kC);
    sm.qscale = take(kC);
    sm.kscale = take(kC);
    sm.beta = take(kC);
  }
  const int h = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int col0 = static_cast<int>(blockIdx.y) * kStateTile;
  const std::int32_t* s = p.seqs + 4 * blockIdx.z;
  const std::int32_t first_row = s[0], n_tokens = s[1], start_pos = s[2], slot = s[3];
  const int kh = h / (p.n_v_heads / p.n_k_heads);
  float* state =
      p.state + (static_cast<std::int64_t>(slot) * p.n_v_heads + h) * dk * dv;  // [dk, dv]
  const int n_chunks = (n_tokens + kC - 1) / kC;
  const int last = min(p.window_first + p.window_chunks, n_chunks);
  const auto chunk_at = [&](int chunk) {
    return ChunkAt{chunk_scratch(p, static_cast<int>(blockIdx.z), chunk - p.window_first, h),
                   static_cast<std::int64_t>(first_row) + chunk * kC,
                   min(kC, n_tokens - chunk * kC)};
  };
  if (p.window_first < last) {
    const ChunkAt c = chunk_at(p.window_first);
    issue_qk(p, c, kh, sm.qk, vec16);
    issue_vec(c, sm.vec);
    issue_square(c.f + kT, sm.t);
    issue_v(p, c, h, col0, sm.r, vec16);
  }
  cp_async_commit();
  const bool fresh = p.window_first == 0 && start_pos == 0;
  for (int e = tid; e < dk * kStateTile; e += kStateThreads) {
    const int row = e / kStateTile, c = col0 + e % kStateTile;
    sm.S[row * kSStride + e % kStateTile] = !fresh && c < dv ? state[row * dv + c] : 0.0f;
  }
  // Warp roles (uniform per warp): step 1's m16 tile of [K; Q] and n8 tiles.
  const int mt = warp % 8, nt0 = 2 * (warp / 8);
  const bool k_warp = mt < 4;
  for (int chunk = p.window_first; chunk < last; ++chunk) {
    const int buf = (chunk - p.window_first) % 2;
    const ChunkAt c = chunk_at(chunk);
    const float* q_s = sm.qk + buf * 2 * kC * ldk;
    const float* k_s = q_s + kC * ldk;
    const float* vec = sm.vec + buf * 4 * kC;
    cp_async_wait<0>();
    __syncthreads();  // this chunk's q, k, t, v, vectors are in; the previous chunk is done
    const float cum_last = vec[3 * kC + c.n - 1];
    if (tid < kC) {
      const float ecum = expf(vec[3 * kC + tid]), kinv = vec[tid];
      sm.rscale[tid] = ecum * kinv;
      sm.qscale[tid] = ecum * vec[kC + tid];
      sm.kscale[tid] = tid < c.n ? expf(cum_last - vec[3 * kC + tid]) * kinv : 0.0f;
      sm.beta[tid] = vec[2 * kC + tid];
    }
    issue_square(c.f + kP, sm.p);
    cp_async_commit();
    if (chunk + 1 < last) {
      const ChunkAt next = chunk_at(chunk + 1);
      issue_qk(p, next, kh, sm.qk + (buf ^ 1) * 2 * kC * ldk, vec16);
      issue_vec(next, sm.vec + (buf ^ 1) * 4 * kC);
    }
    cp_async_commit();
    __syncthreads();  // the scale vectors

    // 1. [K; Q] S: this warp's m16 tile (K rows 16 mt.. or Q rows 16 (mt - 4)..), two n8 tiles.
    float acc[2][4] = {};
    {
      const float* a_rows = (k_warp ? k_s : q_s) + 16 * (mt % 4) * ldk;
#pragma unroll 2
      for (int k0 = 0; k0 < dk; k0 += 8) {
        const Tf32Frag<4, kSplit> a = load_a<kSplit>(a_rows + k0, ldk, g, t);
#pragma unroll
        for (int j = 0; j < 2; ++j)
          mma_frag<kSplit>(acc[j], a,
                           load_b<kSplit>(sm.S + k0 * kSStride + 8 * (nt0 + j), kSStride, g, t));
      }
    }
    // 2. R_i = beta_i (v_i - e^cum_i (K S)_i) over the K warps' fragments (rows i0, i0 + 8).
    if (k_warp) {
      const int i0 = 16 * mt + g;
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const int i = i0 + 8 * (x / 2), col = 8 * (nt0 + j) + 2 * t + x % 2;
          float& r = sm.r[i * kRUStride + col];
          r = sm.beta[i] * (r - sm.rscale[i] * acc[j][x]);
        }
    }
    cp_async_wait<1>();  // this thread's copies of p (the next chunk's q, k may still fly)
    __syncthreads();

    // 3. U = t R: m16 tile w % 4, n8 tile w / 4; t is zero above the diagonal, so k-steps stop
    // past this tile's last row.
    {
      const int m3 = warp % 4, n3 = warp / 4;
      float uc[4] = {};
      for (int k0 = 0; k0 < 16 * (m3 + 1); k0 += 8)
        mma_frag<kSplit>(uc, load_a<kSplit>(sm.t + 16 * m3 * kTPStride + k0, kTPStride, g, t),
                         load_b<kSplit>(sm.r + k0 * kRUStride + 8 * n3, kRUStride, g, t));
#pragma unroll
      for (int x = 0; x < 4; ++x)
        sm.u[(16 * m3 + g + 8 * (x / 2)) * kRUStride + 8 * n3 + 2 * t + x % 2] = uc[x];
    }
    __syncthreads();
    if (chunk + 1 < last) {  // t and r are free until the next chunk
      const ChunkAt next = chunk_at(chunk + 1);
      issue_square(next.f + kT, sm.t);
      issue_v(p, next, h, col0, sm.r, vec16);
    }
    cp_async_commit();

    if (!k_warp) {
      // 4. o_i = e^cum_i (Q S)_i + sum_{j <= i} p[i][j] U_j (p zero above the diagonal).
      const int m4 = mt - 4, i0 = 16 * m4 + g;
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int x = 0; x < 4; ++x) acc[j][x] *= sm.qscale[i0 + 8 * (x / 2)];
      for (int k0 = 0; k0 < 16 * (m4 + 1); k0 += 8) {
        const Tf32Frag<4, kSplit> a =
            load_a<kSplit>(sm.p + 16 * m4 * kTPStride + k0, kTPStride, g, t);
#pragma unroll
        for (int j = 0; j < 2; ++j)
          mma_frag<kSplit>(acc[j], a,
                           load_b<kSplit>(sm.u + k0 * kRUStride + 8 * (nt0 + j), kRUStride, g, t));
      }
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          const int i = i0 + 8 * (x / 2), col = col0 + 8 * (nt0 + j) + 2 * t + x % 2;
          if (i < c.n && col < dv) p.out[(c.row0 + i) * p.out_stride + h * dv + col] = acc[j][x];
        }
    } else {
      // 5. S = e^cum_last S + K^T diag(kscale) U: m16 tile e of S's rows, all four n8 tiles.
      // Only these warps touch S now (step 4 reads p and U).
      const int e = mt + 4 * (warp / 8);
      if (16 * e < dk) {
        const float g_last = expf(cum_last);
        float sc[4][4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int x = 0; x < 4; ++x)
            sc[j][x] = g_last * sm.S[(16 * e + g + 8 * (x / 2)) * kSStride + 8 * j + 2 * t + x % 2];
        for (int k0 = 0; k0 < kC; k0 += 8) {
          const Tf32Frag<4, kSplit> a =
              load_a_transposed<kSplit>(k_s + k0 * ldk + 16 * e, ldk, g, t);
#pragma unroll
          for (int j = 0; j < 4; ++j)
            mma_frag<kSplit>(
                sc[j], a,
                load_b<kSplit>(sm.u + k0 * kRUStride + 8 * j, kRUStride, g, t, sm.kscale + k0));
        }
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int x = 0; x < 4; ++x)
            sm.S[(16 * e + g + 8 * (x / 2)) * kSStride + 8 * j + 2 * t + x % 2] = sc[j][x];
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();
  for (int e = tid; e < dk * kStateTile; e += kStateThreads) {
    const int row = e / kStateTile, c = col0 + e % kStateTile;
    if (c < dv) state[row * dv + c] = sm.S[row * kSStride + e % kStateTile];
  }
}

}  // namespace

std::size_t delta_chunk_state_mma_smem_bytes(int k_dim) {
  return sizeof(float) * static_cast<std::size_t>(smem_floats_async(k_dim));
}

bool delta_rule_chunk_mma_fits(int k_dim, int v_dim) {
  return k_dim > 0 && k_dim <= kChunkMaxKeyDim && k_dim % 16 == 0 && v_dim > 0;
}

void launch_delta_chunk_state_mma(const ChunkedArgs& p, dim3 grid, bool split, Stream s) {
  AKV_CHECK(delta_rule_chunk_mma_fits(p.k_dim, p.v_dim),
            "gated_delta_rule chunked on tensor cores: k_head_dim a multiple of 16, <= 128");
  static bool attributes_set = false;  // the engine thread is the only caller
  if (!attributes_set) {
    const int most = static_cast<int>(delta_chunk_state_mma_smem_bytes(kChunkMaxKeyDim));
    AKV_CUDA_CHECK(cudaFuncSetAttribute(delta_chunk_state_mma_kernel<true>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, most));
    AKV_CUDA_CHECK(cudaFuncSetAttribute(delta_chunk_state_mma_kernel<false>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, most));
    attributes_set = true;
  }
  // 16-byte copies where every q, k and v row segment is 16-byte aligned, else 4-byte ones.
  const bool vec16 = reinterpret_cast<std::uintptr_t>(p.qkv) % 16 == 0 && p.qkv_stride % 4 == 0 &&
                     p.k_dim % 4 == 0 && p.v_dim % 4 == 0;
  const std::size_t smem = delta_chunk_state_mma_smem_bytes(p.k_dim);
  if (split)
    launch(delta_chunk_state_mma_kernel<true>, grid, kStateThreads, smem, s, p, vec16);
  else
    launch(delta_chunk_state_mma_kernel<false>, grid, kStateThreads, smem, s, p, vec16);
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
