// Prefill attention on Hopper's warpgroup tensor-core instructions (wgmma, sm_90a), for BF16 KV,
// head_dim 64 or 128 and an even GQA group. One block = 64 query rows of one sequence chunk for
// two query heads that share a KV head; each head is one warpgroup (4 warps, 16 rows each).
// Per key tile of 64 positions: S = Q K^T by wgmma with both operands in shared memory, the
// online softmax on S in registers, then O += P V by wgmma with P from registers. K/V tiles are
// gathered through the block table with cp.async, two stages deep.
//
// Shared memory holds Q, K and V in the no-swizzle "core matrix" layout wgmma reads: 8 rows x
// 16 bytes (8 bf16) stored as 128 contiguous bytes, core matrices along the head dimension next
// to each other, then the next 8 rows. Descriptors: K-direction stride 128 B (K-major Q and K)
// or 8 rows (V, read N-major), the other direction the other stride; checked on an H200.
#include "backend/cuda/attention_prefill_wgmma.h"

#include <cmath>

#include "backend/cuda/attention_split.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kv_tile.cuh"
#include "backend/cuda/mma_util.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define AKV_WGMMA_DEVICE 1
#endif

namespace akv::cuda {
namespace {

constexpr int kRows = kPrefillTileRows;  // query rows per head and block (one m64 warpgroup tile)
constexpr int kKeys = 64;                // keys per tile
constexpr int kStages = 2;

using bf16 = __nv_bfloat16;

static_assert(kRows == 64, "one wgmma m64 tile of query rows per head");
static_assert(kKeys == kPrefillSplitAlign, "splits are runs of whole key tiles");

template <int D, int kHeads>
constexpr int smem_bytes() {
  return (kHeads * kRows + 2 * kStages * kKeys) * D * static_cast<int>(sizeof(bf16));
}

// Element offset of (row, col) in the core-matrix layout of a [rows][D] tile.
template <int D>
__device__ __forceinline__ int core_offset(int row, int col) {
  return ((row >> 3) * (D / 8) + (col >> 3)) * 64 + (row & 7) * 8 + (col & 7);
}

// A wgmma shared-memory descriptor, no swizzle: start address, K-direction and M/N-direction
// byte strides between core matrices.
__device__ __forceinline__ std::uint64_t smem_desc(const void* p, std::uint32_t k_stride, std::uint32_t mn_stride) {
  return static_cast<std::uint64_t>((smem_addr(p) >> 4) & 0x3fff) |
         (static_cast<std::uint64_t>((k_stride >> 4) & 0x3fff) << 16) |
         (static_cast<std::uint64_t>((mn_stride >> 4) & 0x3fff) << 32);
}

#ifdef AKV_WGMMA_DEVICE
// Writes of ordinary (generic-proxy) stores and cp.async become visible to wgmma (async proxy).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
// Ties a register to the point of the call: no use of it moves across (wgmma writes it behind
// the compiler's back until the wait).
__device__ __forceinline__ void pin(float& r) { asm volatile("" : "+f"(r)::"memory"); }

#define AKV_ACC8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                    "+f"(d[i + 6]), "+f"(d[i + 7])

// d[64 x 64] (+)= A[64 x 16] B[64 x 16]^T, A and B K-major in shared memory.
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], std::uint64_t a, std::uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : AKV_ACC8(0), AKV_ACC8(8), AKV_ACC8(16), AKV_ACC8(24)
      : "l"(a), "l"(b), "r"(accumulate));
}

// d[64 x 64] += A[64 x 16] B[16 x 64], A in registers, B N-major in shared memory.
__device__ __forceinline__ void wgmma_rs_n64(float (&d)[32], const std::uint32_t (&a)[4], std::uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, 1, 1, 1, 1;\n"
      : AKV_ACC8(0), AKV_ACC8(8), AKV_ACC8(16), AKV_ACC8(24)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

// d[64 x 128] += A[64 x 16] B[16 x 128], A in registers, B N-major in shared memory.
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const std::uint32_t (&a)[4], std::uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, 1, 1, 1, 1;\n"
      : AKV_ACC8(0), AKV_ACC8(8), AKV_ACC8(16), AKV_ACC8(24), AKV_ACC8(32), AKV_ACC8(40), AKV_ACC8(48),
        AKV_ACC8(56)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
#undef AKV_ACC8

template <int D>
__device__ __forceinline__ void wgmma_pv(float (&d)[D / 2], const std::uint32_t (&a)[4], std::uint64_t b) {
  if constexpr (D == 64)
    wgmma_rs_n64(d, a, b);
  else
    wgmma_rs_n128(d, a, b);
}
#endif  // AKV_WGMMA_DEVICE

// Accumulator element (n8 tile j, e) of a thread sits at row 16 * warp + g + 8 * (e / 2),
// column 8 * j + 2 * c + e % 2 of its warpgroup's m64 tile (g = lane / 4, c = lane % 4).
template <int D, int kHeads, bool kSoftcap>
__global__ void __launch_bounds__(kHeads * 128, 4 / kHeads)
    prefill_attention_wgmma_kernel(const float* __restrict__ q, std::int64_t qs, float* __restrict__ out,
                                   std::int64_t os, KvView kv, DeviceBatch b, AttentionArgs a, int n_splits,
                                   float* __restrict__ partial) {
#ifdef AKV_WGMMA_DEVICE
  pdl_trigger();
  pdl_wait();
  constexpr int kThreads = kHeads * 128;
  constexpr int kChunks = D / 8;                     // 16-byte pieces of a K/V row
  constexpr int kPieces = kKeys * kChunks / kThreads;  // pieces of a K (and a V) tile per thread
  constexpr std::uint32_t kRowGroupBytes = kChunks * 128;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);  // [kHeads][kRows x D], core-matrix layout
  bf16* Ks = Qs + kHeads * kRows * D;        // [kStages][kKeys x D]
  bf16* Vs = Ks + kStages * kKeys * D;       // [kStages][kKeys x D]

  // Heads vary fastest over the grid, so the longest tiles of every head start first.
  const int tile = b.n_tiles - 1 - static_cast<int>(blockIdx.y);
  const int h0 = blockIdx.x * kHeads;
  const PrefillTile pt = prefill_tile<kRows>(b, a, tile);
  const int first_row = pt.first_row, rows = pt.rows, pos0 = pt.pos0;
  const std::int32_t* table = pt.table;
  const int split = blockIdx.z;
  const KeyRange range = prefill_split_keys(b, a, n_splits, first_row, pt.lo, pt.last, split);
  if (range.begin >= range.end) return;  // the whole block: this tile needs fewer splits
  const int lo = range.begin, end = range.end;
  const int kvh = h0 / (a.n_heads / a.n_kv_heads);
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, c = lane % 4;

  // Piece i = tid + k * kThreads of a tile is row (i / (8 * kChunks)) * 8 + i % 8, chunk
  // (i / 8) % kChunks: in the core layout its bytes start at i * 16, so a warp's copies land
  // on consecutive 16-byte slots.
  const int chunk = (tid / 8) % kChunks;
  const bf16* kc = static_cast<const bf16*>(kv.k) + std::int64_t{kvh} * D + chunk * 8;
  const bf16* vc = static_cast<const bf16*>(kv.v) + std::int64_t{kvh} * D + chunk * 8;
  auto load_kv = [&](int buf, int kb) {
#pragma unroll
    for (int k = 0; k < kPieces; ++k) {
      const int i = tid + k * kThreads;
      const int p = kb + (i / (8 * kChunks)) * 8 + i % 8;
      bf16* kd = Ks + buf * kKeys * D + i * 8;
      bf16* vd = Vs + buf * kKeys * D + i * 8;
      gather_kv16(kd, vd, kc, vc, kv, table, p, p < end);
    }
  };

  const int n_kt = (end - lo + kKeys - 1) / kKeys;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_kt) load_kv(s, lo + s * kKeys);
    cp_async_commit();
  }

  // Q rounded to bf16 into the core layout; the barrier of the first key tile publishes it.
  for (int i = tid; i < kHeads * kRows * (D / 4); i += kThreads) {
    const int r = i / (D / 4), c4 = (i % (D / 4)) * 4;
    const int rh = r / kRows, rr = r % kRows;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (rr < rows)
      v = *reinterpret_cast<const float4*>(q + (first_row + rr) * qs + std::int64_t{h0 + rh} * D + c4);
    bf16* dst = Qs + rh * kRows * D + core_offset<D>(rr, c4);
    *reinterpret_cast<uint2*>(dst) = make_uint2(pack_bf16(v.x, v.y), pack_bf16(v.z, v.w));
  }
  const bf16* Qh = Qs + wg * kRows * D;

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  const int row0 = 16 * warp + g;  // this thread's rows: row0, row0 + 8
  const int qpos0 = pos0 + row0;
  const float scale_log2 = a.scale * kLog2e;

  for (int it = 0; it < n_kt; ++it) {
    const int kb = lo + it * kKeys;
    // Tile `it` has landed; after the barrier every warpgroup is done with the buffer the
    // prefetch below overwrites (its wgmmas of iteration it - 1 have completed).
    cp_async_wait<kStages - 2>();
    fence_proxy_async();
    __syncthreads();
    if (it + kStages - 1 < n_kt) load_kv((it + kStages - 1) % kStages, kb + (kStages - 1) * kKeys);
    cp_async_commit();
    const bf16* Kt = Ks + (it % kStages) * kKeys * D;
    const bf16* Vt = Vs + (it % kStages) * kKeys * D;

    float s[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) s[i] = 0.0f;
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      wgmma_ss_n64(s, smem_desc(Qh + ks * 16 * 8, 128, kRowGroupBytes), smem_desc(Kt + ks * 16 * 8, 128, kRowGroupBytes),
                   ks > 0);
    wgmma_commit();
    wgmma_wait_all();
#pragma unroll
    for (int i = 0; i < 32; ++i) pin(s[i]);

    // Scores in log2 units (exp2 below). Only tiles reaching past this warp's first query or the
    // split's end, and sliding windows, need the mask.
    const bool masked = a.window > 0 || kb + kKeys - 1 > pos0 + 16 * warp || kb + kKeys > end;
    float mx[2] = {m_run[0], m_run[1]};
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        float x;
        if constexpr (kSoftcap)
          x = a.softcap * tanhf(s[4 * j + e] * a.scale / a.softcap) * kLog2e;
        else
          x = s[4 * j + e] * scale_log2;
        if (masked) {
          const int key = kb + 8 * j + 2 * c + (e & 1);
          const int qp = qpos0 + 8 * r;
          x = key <= qp && key < end && (a.window <= 0 || key > qp - a.window) ? x : -INFINITY;
        }
        s[4 * j + e] = x;
        mx[r] = fmaxf(mx[r], x);
      }
    float base[2], corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      base[r] = mx[r] == -INFINITY ? 0.0f : mx[r];
      corr[r] = fast_exp2(m_run[r] - base[r]);
      m_run[r] = mx[r];
    }
    float rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const float p = fast_exp2(s[i] - base[(i >> 1) & 1]);
      s[i] = p;
      rs[(i >> 1) & 1] += p;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * corr[r] + rs[r];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] *= corr[(i >> 1) & 1];

    // P as the bf16 A fragments of the k16 steps, all packed before the first wgmma reads them
    // (packing between the wgmmas made ptxas serialise them).
    std::uint32_t pa[kKeys / 16][4];
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk)
#pragma unroll
      for (int k = 0; k < 4; ++k) pa[kk][k] = pack_bf16(s[8 * kk + 2 * k], s[8 * kk + 2 * k + 1]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) wgmma_pv<D>(o, pa[kk], smem_desc(Vt + kk * 16 * D, kRowGroupBytes, 128));
    wgmma_commit();
    wgmma_wait_all();
#pragma unroll
    for (int i = 0; i < D / 2; ++i) pin(o[i]);
  }
  cp_async_wait<0>();

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int row = row0 + 8 * r;
    if (row >= rows) continue;
    const std::int64_t t = first_row + row;
    if (n_splits > 1) {  // merge_kernel's partial row: max in natural-log units, sum, acc
      float* p = partial + ((t * a.n_heads + h0 + wg) * n_splits + split) * (D + 2);
      if (c == 0) {
        p[0] = m_run[r] / kLog2e;
        p[1] = l;
      }
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
        *reinterpret_cast<float2*>(p + 2 + 8 * j + 2 * c) = make_float2(o[4 * j + 2 * r], o[4 * j + 2 * r + 1]);
      continue;
    }
    // A sink adds exp(sink) to the softmax's denominator (m_run and l are in log2 units).
    if (a.sinks != nullptr) l += exp2f(a.sinks[h0 + wg] * kLog2e - m_run[r]);
    const float inv = 1.0f / l;
    float* orow = out + t * os + std::int64_t{h0 + wg} * D + 2 * c;
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
      *reinterpret_cast<float2*>(orow + 8 * j) = make_float2(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
  }
#else
  (void)q, (void)qs, (void)out, (void)os, (void)kv, (void)b, (void)a, (void)n_splits, (void)partial;
  __trap();  // launched only where the sm_90a image exists (prefill_attention_wgmma_supported)
#endif
}

template <int D, int kHeads, bool kSoftcap>
void launch_dhs(TensorRef q, const KvView& kv, const DeviceBatch& b, const AttentionArgs& a, int n_splits,
                float* partial, TensorRef out, Stream s) {
  static bool attribute_set = false;  // the engine thread is the only caller
  if (!attribute_set) {
    AKV_CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_wgmma_kernel<D, kHeads, kSoftcap>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes<D, kHeads>()));
    attribute_set = true;
  }
  launch(prefill_attention_wgmma_kernel<D, kHeads, kSoftcap>, dim3(a.n_heads / kHeads, b.n_tiles, n_splits),
         kHeads * 128, smem_bytes<D, kHeads>(), s, static_cast<const float*>(q.data), q.stride,
         static_cast<float*>(out.data), out.stride, kv, b, a, n_splits, partial);
}

// The whole GQA group of four heads per block where it divides (K/V tiles come through L2 once
// for four heads), else two.
template <int D, bool kSoftcap>
void launch_ds(TensorRef q, const KvView& kv, const DeviceBatch& b, const AttentionArgs& a, int n_splits,
               float* partial, TensorRef out, Stream s) {
  if (prefill_attention_wgmma_heads(a) == 4)
    launch_dhs<D, 4, kSoftcap>(q, kv, b, a, n_splits, partial, out, s);
  else
    launch_dhs<D, 2, kSoftcap>(q, kv, b, a, n_splits, partial, out, s);
}

}  // namespace

bool prefill_attention_wgmma_supported(const AttentionArgs& a) {
  static const bool device_ok = [] {  // an sm_90 device, and this build's sm_90a image loads on it
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    AKV_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    AKV_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    cudaFuncAttributes attr{};
    const bool loads = cudaFuncGetAttributes(&attr, prefill_attention_wgmma_kernel<128, 2, false>) == cudaSuccess;
    (void)cudaGetLastError();  // a failed query must not surface at the next launch check
    return major == 9 && minor == 0 && loads;
  }();
  return device_ok && (a.head_dim == 64 || a.head_dim == 128) && (a.n_heads / a.n_kv_heads) % 2 == 0;
}

int prefill_attention_wgmma_heads(const AttentionArgs& a) { return (a.n_heads / a.n_kv_heads) % 4 == 0 ? 4 : 2; }

void launch_attention_prefill_wgmma(TensorRef q, const KvView& kv, const DeviceBatch& b, const AttentionArgs& a,
                                    int n_splits, float* partial, TensorRef out, Stream s) {
  if (a.head_dim == 64) {
    if (a.softcap > 0.0f)
      launch_ds<64, true>(q, kv, b, a, n_splits, partial, out, s);
    else
      launch_ds<64, false>(q, kv, b, a, n_splits, partial, out, s);
  } else {
    if (a.softcap > 0.0f)
      launch_ds<128, true>(q, kv, b, a, n_splits, partial, out, s);
    else
      launch_ds<128, false>(q, kv, b, a, n_splits, partial, out, s);
  }
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
