// Batched-decode matmul on the tensor cores: out[n, m] = x[n, k] @ w[m, k]^T for 2..8 rows of
// f32 x and BF16 w, bound by reading w once per call. Each warp streams 32 rows of w straight
// from global memory into mma.sync A fragments (16-byte loads) and applies them to every row of
// x; x is split into two bf16 halves (hi + lo, mma twice) so the result keeps f32 activations
// (relative error ~1e-6, like the GEMV). k is split over blocks when the rows alone do not fill
// the GPU; the last block of a row tile adds the splits in a fixed order (deterministic).
#include <algorithm>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/gemv_targets.cuh"
#include "backend/cuda/kernels.h"

namespace akv::cuda {
namespace {

constexpr int kWarps = 4;            // per block; each owns kTilesM * 16 rows of w
constexpr int kTilesM = 2;           // 16-row mma tiles per warp
constexpr int kBlockRows = kWarps * kTilesM * 16;
constexpr int kChunk = 64;           // k per pipeline step: 128 contiguous bytes of each w row
constexpr int kMinSplitK = 4 * kChunk;
constexpr int kNT = kSkinnyMaxRows / 8;  // 8-token mma tiles (more measured slower than cuBLAS)
constexpr int kMaxTiles = kSkinnyCounters;  // row tiles that may split k (one counter each)

// Grid: (row tiles of all targets, k splits). Lane (g, c) = (lane / 4, lane % 4) loads 16
// consecutive k of rows g and g + 8 per 32 k; the mma's k order is permuted the same way for w
// and x (k 2c, 2c+1, 2c+8, 2c+9 of a step are elements 0-3 or 4-7 of the lane's 8), so both
// fragments come from plain 16-byte loads.
__global__ void __launch_bounds__(kWarps * 32)
    skinny_gemm_kernel(const float* __restrict__ x, std::int64_t xs, std::int32_t k, std::int32_t n,
                       GemvTargets<__nv_bfloat16> set, std::int32_t k_split, float* __restrict__ partial,
                       unsigned* __restrict__ counters) {
  pdl_trigger();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
  const int tile = blockIdx.x;
  const GemvTarget<__nv_bfloat16> tg = set.target_of(tile);  // a block is a tile of kBlockRows rows
  const __nv_bfloat16* w = tg.w;
  float* y = tg.y;
  const std::int64_t ys = tg.ys;
  const std::int32_t m = tg.m;
  const std::int32_t tile_row0 = (tile - tg.first_block) * kBlockRows;
  const std::int32_t warp_row0 = tile_row0 + warp * kTilesM * 16;
  const std::int32_t k0 = static_cast<std::int32_t>(blockIdx.y) * k_split;
  const std::int32_t k1 = min(k, k0 + k_split);

  // [tile][row g / g + 8] this lane's row pointers, at its 16 k of each chunk.
  const __nv_bfloat16* wr[kTilesM][2];
#pragma unroll
  for (int mt = 0; mt < kTilesM; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      wr[mt][h] = w + std::int64_t{min(warp_row0 + mt * 16 + g + 8 * h, m - 1)} * k + 16 * c;

  using Chunk = uint4[kTilesM][2][2];  // [tile][row g / g + 8][first / second 8 k]
  auto load_w = [&](Chunk& dst, std::int32_t kc) {
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const bool in = kc + 16 * c + 8 * q < k1;
#pragma unroll
      for (int mt = 0; mt < kTilesM; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) dst[mt][h][q] = in ? load_stream(wr[mt][h] + kc + 8 * q) : make_uint4(0, 0, 0, 0);
    }
  };

  float acc[kTilesM][kNT][4] = {};
  auto compute = [&](const Chunk& wc, std::int32_t kc) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int t = nt * 8 + g;
      std::uint32_t bh[2][4], bl[2][4];  // [first / second 8 k][pair]: hi and lo halves of x
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const std::int32_t idx = kc + 16 * c + 8 * q;
        const bool in = t < n && idx < k1;
        {
          float4 a = make_float4(0.f, 0.f, 0.f, 0.f), b = a;
          if (in) {
            const float4* p = reinterpret_cast<const float4*>(x + t * xs + idx);
            a = __ldg(p);
            b = __ldg(p + 1);
          }
          split_bf16(a.x, a.y, bh[q][0], bl[q][0]);
          split_bf16(a.z, a.w, bh[q][1], bl[q][1]);
          split_bf16(b.x, b.y, bh[q][2], bl[q][2]);
          split_bf16(b.z, b.w, bh[q][3], bl[q][3]);
        }
      }
#pragma unroll
      for (int s = 0; s < 4; ++s) {  // mma k-steps: elements 4(s % 2) .. +3 of the lane's 8 in half s / 2
        const int q = s / 2, e = 2 * (s % 2);
        const std::uint32_t bh0 = bh[q][e], bh1 = bh[q][e + 1], bl0 = bl[q][e], bl1 = bl[q][e + 1];
#pragma unroll
        for (int mt = 0; mt < kTilesM; ++mt) {
          const uint4& lo = wc[mt][0][q];
          const uint4& hi = wc[mt][1][q];
          const std::uint32_t a[4] = {s % 2 ? lo.z : lo.x, s % 2 ? hi.z : hi.x, s % 2 ? lo.w : lo.y,
                                      s % 2 ? hi.w : hi.y};
          mma_bf16(acc[mt][nt], a, bh0, bh1);
          mma_bf16(acc[mt][nt], a, bl0, bl1);
        }
      }
    }
  };

  // Weights never depend on earlier kernels: the first chunk is requested before waiting for x.
  Chunk wa, wb;
  load_w(wa, k0);
  pdl_wait();
  for (std::int32_t kc = k0; kc < k1; kc += 2 * kChunk) {
    if (kc + kChunk < k1) load_w(wb, kc + kChunk);
    compute(wa, kc);
    if (kc + kChunk >= k1) break;
    if (kc + 2 * kChunk < k1) load_w(wa, kc + 2 * kChunk);
    compute(wb, kc + kChunk);
  }

  // Accumulator element e of tile (mt, nt): row g + 8 * (e / 2), token 2c + e % 2.
  if (gridDim.y == 1) {
#pragma unroll
    for (int mt = 0; mt < kTilesM; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const std::int32_t row = warp_row0 + mt * 16 + g + 8 * (e / 2);
          const int t = nt * 8 + 2 * c + e % 2;
          if (row < m && t < n) y[t * ys + row] = acc[mt][nt][e];
        }
    return;
  }
  // Split k: partial [split][token][tile * kBlockRows + local row], then the last block sums.
  const std::int64_t vrows = std::int64_t{gridDim.x} * kBlockRows;
  const std::int64_t vrow0 = std::int64_t{tile} * kBlockRows;
#pragma unroll
  for (int mt = 0; mt < kTilesM; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int local = warp * kTilesM * 16 + mt * 16 + g + 8 * (e / 2);
        const int t = nt * 8 + 2 * c + e % 2;
        if (t < n) partial[(std::int64_t{blockIdx.y} * n + t) * vrows + vrow0 + local] = acc[mt][nt][e];
      }
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(&counters[tile], 1u) == gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int i = threadIdx.x; i < n * (kBlockRows / 4); i += kWarps * 32) {
    const int t = i / (kBlockRows / 4), local = 4 * (i % (kBlockRows / 4));
    const float4* p = reinterpret_cast<const float4*>(partial + std::int64_t{t} * vrows + vrow0 + local);
    const std::int64_t step = std::int64_t{n} * vrows / 4;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (unsigned sp = 0; sp < gridDim.y; ++sp) {  // splits in a fixed order
      const float4 a = __ldcg(p + sp * step);
      v.x += a.x, v.y += a.y, v.z += a.z, v.w += a.w;
    }
    const float r[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (tile_row0 + local + e < m) y[t * ys + tile_row0 + local + e] = r[e];
  }
  if (threadIdx.x == 0) counters[tile] = 0;  // ready for the next launch
}

struct Occupancy {
  int sms = 0, blocks_per_sm = 0;
};

Occupancy occupancy() {
  static Occupancy o;  // the engine thread is the only caller
  if (o.sms == 0) {
    int device = 0;
    AKV_CUDA_CHECK(cudaGetDevice(&device));
    AKV_CUDA_CHECK(cudaDeviceGetAttribute(&o.sms, cudaDevAttrMultiProcessorCount, device));
    AKV_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o.blocks_per_sm, skinny_gemm_kernel,
                                                                 kWarps * 32, 0));
  }
  return o;
}

void launch_skinny(TensorRef x, std::span<const GemvOutput> outs, const SkinnyScratch& scratch, Stream s) {
  const GemvTargets<__nv_bfloat16> set = make_gemv_targets<__nv_bfloat16>(outs, kBlockRows);
  const std::int32_t tiles = set.first_block[set.count];
  // Split k until one wave of resident blocks is filled, each split keeping kMinSplitK (half a
  // wave measured slower: the kernel needs every resident block's loads in flight).
  const auto k = static_cast<std::int32_t>(x.cols);
  const Occupancy o = occupancy();
  int splits = 1;
  if (tiles <= kMaxTiles && scratch.partial != nullptr)
    splits = std::clamp(o.sms * o.blocks_per_sm / tiles, 1, std::max(1, k / kMinSplitK));
  std::int32_t k_split = (k + splits - 1) / splits;
  k_split = (k_split + kChunk - 1) / kChunk * kChunk;
  splits = (k + k_split - 1) / k_split;
  AKV_CHECK(splits == 1 || static_cast<std::size_t>(splits) * x.rows * tiles * kBlockRows <= scratch.partial_floats,
            "skinny gemm: partial scratch too small");
  launch(skinny_gemm_kernel, dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(splits)), kWarps * 32, 0, s,
         static_cast<const float*>(x.data), x.stride, k, static_cast<std::int32_t>(x.rows), set, k_split,
         scratch.partial, scratch.counters);
}

}  // namespace

std::size_t skinny_gemm_partial_floats(std::int64_t n, std::int64_t k, std::span<const std::int64_t> rows) {
  std::int64_t tiles = 0;
  for (std::int64_t r : rows) tiles += blocks_for(r, kBlockRows);
  if (tiles > kMaxTiles) return 0;
  const std::int64_t most_splits = std::max<std::int64_t>(1, k / kMinSplitK) + 1;
  return static_cast<std::size_t>(most_splits * n * tiles * kBlockRows);
}

bool skinny_gemm_supported(TensorRef x, std::span<const GemvOutput> outs) {
  if (x.rows < 2 || x.rows > kSkinnyMaxRows || x.cols % 8 != 0) return false;
  if (reinterpret_cast<std::uintptr_t>(x.data) % 16 != 0 || x.stride % 4 != 0) return false;
  for (const GemvOutput& o : outs)
    if (o.w->dtype != DType::BF16 || reinterpret_cast<std::uintptr_t>(o.w->data) % 16 != 0) return false;
  return true;
}

void launch_skinny_gemm(TensorRef x, std::span<const GemvOutput> outs, const SkinnyScratch& scratch, Stream s) {
  AKV_CHECK(!outs.empty() && outs.size() <= kGemvMaxTargets, "skinny gemm: 1 to kGemvMaxTargets outputs");
  AKV_CHECK(skinny_gemm_supported(x, outs), "skinny gemm: unsupported shape, dtype or alignment");
  for (const GemvOutput& o : outs)
    AKV_CHECK(x.cols == o.w->cols && o.out.rows == x.rows && o.out.cols == o.w->rows && o.w->rows < (1ll << 31),
              "skinny gemm shape");
  launch_skinny(x, outs, scratch, s);
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
