// The quantized matmul on the tensor cores (quant_gemv.h: launch_quant_mma_multi). A block takes
// 16 weight rows of one target; its warps split the row's columns into stages of 256 (warp w
// takes stages w, w + kWarps, ...). Each stage's bytes of the 16 rows come in with 16-byte
// asynchronous copies (cp.async) into a ring of kPipe shared-memory slots per warp, kPipe - 1
// stages in flight while one is used. For each 32-column group of a stage, each lane decodes its
// codes of weight rows g and g + 8 (g = lane / 4) into an int8 A fragment, the activation codes of
// eight rows are the B fragment, one mma.sync m16n8k32 (Q6_K: two m16n8k16, one per 16-element
// scale) gives the int32 dots of 16 x 8 (weight row, activation row) pairs, and the block's and
// the activation's scales are applied in f32. The warps' partial sums meet in shared memory.
// Each weight byte is read from memory once per launch, whatever n; the activations (n x cols
// int8, a few KB, group-major so that each fragment load is one contiguous run) are read by every
// block from L1/L2.
#include <algorithm>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/quant_device.cuh"
#include "backend/cuda/quant_fragment.cuh"
#include "backend/cuda/quant_gemv.h"
#include "backend/cuda/quant_launch.cuh"

namespace akv::cuda {
namespace {

using namespace quant;

constexpr int kWarps = 4;      // per block, splitting the columns
constexpr int kTileRows = 16;  // weight rows per block: the mma's M
constexpr int kStageElems =
    256;  // columns per stage: one k-quant super-block, eight 32-element blocks
constexpr int kGroups = kStageElems / kQuantGroup;
constexpr int kPipe = 4;  // shared-memory slots per warp: stages in flight + the one in use
static_assert(kQuantGroup == 32, "a group is one mma k32 step");

// c[4] = a (m16k32 s8 fragment) x (b0, b1) (k32n8), int32.
__device__ __forceinline__ void mma_s8_k32(int* c, const int* a, int b0, int b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}

// c[4] = (a0, a1) (m16k16 s8 fragment) x b (k16n8), int32.
__device__ __forceinline__ void mma_s8_k16(int* c, int a0, int a1, int b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a0), "r"(a1), "r"(b), "r"(0));
}

template <GgmlType T>
struct Stage {
  static constexpr int kBlocks = kStageElems / Geometry<T>::kElems;
  static constexpr int kBytes = kBlocks * Geometry<T>::kBytes;  // of one row
  // 16-byte words covering kBytes from any 16-byte-aligned-down start.
  static constexpr int kWords = kBytes / 16 + 2;
  // A row's place in a slot: kWords + 1 words of slack for ld_u32 past the end, rounded so that
  // the rows of one fragment load fall in different banks: an odd number of 16-byte words for
  // 4-byte loads (8 rows x 16 bytes), of 32-byte units for 8-byte ones (4 rows x 32 bytes a phase).
  static constexpr int kRowBytes =
      Fragment<T>::kWide ? (((kWords + 2) / 2) | 1) * 32 : ((kWords + 1) | 1) * 16;
  static constexpr int kSlotBytes = kTileRows * kRowBytes;
  static constexpr int kCopiesPerLane = (kTileRows * kWords + 31) / 32;
};

// Dynamic shared memory of a block: the warps' slots and scale tables; the partial sums at the
// end reuse it.
template <GgmlType T, int kNT>
constexpr int smem_bytes() {
  const int staging = kWarps * (kPipe * Stage<T>::kSlotBytes +
                                kTileRows * kGroups * static_cast<int>(sizeof(GroupScales)));
  const int partials = kWarps * kTileRows * kNT * 8 * static_cast<int>(sizeof(float));
  return std::max(staging, partials);
}

// kNT tiles of 8 activation rows, kNT * 8 >= n8 (n rounded up to 8); the activations in the
// group-major layout of launch_quantize_mma_activations (rows n..n8-1 zero, never stored).
template <GgmlType T, int kNT>
__global__ void __launch_bounds__(kWarps * 32)
    quant_mma_kernel(QuantLaunchTargets tg, std::int64_t row_bytes, std::int32_t cols,
                     const std::int8_t* __restrict__ codes, const float2* __restrict__ scales,
                     std::int32_t n, std::int32_t n8) {
  using S = Stage<T>;
  using G = Geometry<T>;
  using F = Fragment<T>;
  extern __shared__ __align__(16) std::uint8_t smem[];
  pdl_trigger();
  const BlockTarget bt = block_target(tg);
  const std::uint8_t* __restrict__ w = bt.w;
  float* __restrict__ y = bt.y;
  const std::int64_t ys = bt.ys;
  const std::int32_t rows = bt.rows, block = bt.block;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const std::int32_t row0 = block * kTileRows;
  const std::int32_t row_blocks = cols / G::kElems, groups = cols / kQuantGroup;
  const std::int32_t n_stages = (row_blocks + S::kBlocks - 1) / S::kBlocks;
  const std::int32_t my_stages = n_stages > warp ? (n_stages - warp + kWarps - 1) / kWarps : 0;
  std::uint8_t* slots = smem + warp * kPipe * S::kSlotBytes;
  GroupScales* table = reinterpret_cast<GroupScales*>(smem + kWarps * kPipe * S::kSlotBytes) +
                       warp * kTileRows * kGroups;

  // Row r of the tile (past the matrix's end: a repeat of its last row, never stored) and where
  // its bytes of stage st begin: copies start at the 16-byte word holding the first byte.
  auto row_ptr = [&](int r) { return w + std::int64_t{min(row0 + r, rows - 1)} * row_bytes; };
  auto stage_ptr = [&](int r, std::int32_t st) {
    return row_ptr(r) + std::int64_t{st} * S::kBytes;
  };
  auto skew = [](const std::uint8_t* p) {
    return static_cast<int>(reinterpret_cast<std::uintptr_t>(p) & 15);
  };
  // Requests this warp's i-th stage into slot i % kPipe; one commit group per stage (empty past
  // the last), so waiting for all but the newest kPipe - 2 groups means stage i has landed.
  auto request = [&](std::int32_t i) {
    if (i < my_stages) {
      const std::int32_t st = warp + i * kWarps;
      const int bytes = min(S::kBlocks, row_blocks - st * S::kBlocks) * G::kBytes;
      std::uint8_t* slot = slots + (i % kPipe) * S::kSlotBytes;
#pragma unroll
      for (int u = 0; u < S::kCopiesPerLane; ++u) {
        const int idx = lane + 32 * u, r = idx / S::kWords, word = idx % S::kWords;
        if (r < kTileRows) {
          const std::uint8_t* p = stage_ptr(r, st);
          const int sk = skew(p);
          if (16 * word < sk + bytes)
            cp_async16(slot + r * S::kRowBytes + 16 * word, p - sk + 16 * word);
        }
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int i = 0; i < kPipe - 1; ++i) request(i);
  pdl_wait();  // activations come from the kernel before

  float acc[kNT][4];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[nt][c] = 0.0f;
  // Activation rows of this lane: B fragment row nt * 8 + g, accumulator columns nt * 8 + 2t and
  // + 1 (their scales one 16-byte load); tiles at or past n8 are skipped.
  const std::int8_t* xb = codes + g * kQuantGroup + (F::kPaired ? 8 * t : 4 * t);
  const float4* sx = reinterpret_cast<const float4*>(scales + 2 * t);

  // A chunk of a stage's activation fragments (B) and scales, kChunk groups x kNT tiles, loaded
  // without a branch before anything waits for them: these loads go to L1/L2, and issued one
  // group at a time each would cost the warp a full round trip.
  constexpr int kChunk = kGroups / kNT;  // 48 registers
  struct ActFragment {
    int b0, b1;
    float4 s;  // (d, d * sum) of accumulator columns 2t and 2t + 1
  };
  auto load_acts = [&](std::int32_t st, int j0, ActFragment(&f)[kChunk][kNT]) {
#pragma unroll
    for (int c = 0; c < kChunk; ++c) {
      // Groups past the row's end (a partial last stage) and tiles past n8 read valid memory
      // and are never accumulated or stored.
      const std::int32_t group = min(st * kGroups + j0 + c, groups - 1);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const std::int64_t tile = std::int64_t{group} * n8 + min(nt * 8, n8 - 8);  // [group][n8]
        const std::int8_t* xq = xb + tile * kQuantGroup;
        if constexpr (F::kPaired) {
          const int2 v = __ldg(reinterpret_cast<const int2*>(xq));
          f[c][nt].b0 = v.x;
          f[c][nt].b1 = v.y;
        } else {
          f[c][nt].b0 = __ldg(reinterpret_cast<const int*>(xq));
          f[c][nt].b1 = __ldg(reinterpret_cast<const int*>(xq + 16));
        }
        f[c][nt].s = __ldg(sx + tile / 2);
      }
    }
  };

  for (std::int32_t i = 0; i < my_stages; ++i) {
    const std::int32_t st = warp + i * kWarps;
    ActFragment f[kChunk][kNT];
    load_acts(st, 0, f);
    cp_async_wait<kPipe - 2>();  // this lane's copies of stage i are in
    __syncwarp();                // and every lane's; the slot refilled next was last read before
    request(i + kPipe - 1);
    const std::uint8_t* slot = slots + (i % kPipe) * S::kSlotBytes;
    const int n_groups = min(kGroups, groups - st * kGroups);
    // The scales of the tile's 16 rows x 8 groups, table[j * 16 + r], four per lane.
#pragma unroll
    for (int u = 0; u < kTileRows * kGroups / 32; ++u) {
      const int idx = lane + 32 * u, r = idx % kTileRows, j = idx / kTileRows;
      if (j < n_groups) table[idx] = F::scales(slot + r * S::kRowBytes + skew(stage_ptr(r, st)), j);
    }
    __syncwarp();
    const std::uint8_t* ra = slot + g * S::kRowBytes + skew(stage_ptr(g, st));
    const std::uint8_t* rb = slot + (g + 8) * S::kRowBytes + skew(stage_ptr(g + 8, st));
#pragma unroll
    for (int j0 = 0; j0 < kGroups; j0 += kChunk) {
      if (j0 > 0) load_acts(st, j0, f);
#pragma unroll
      for (int c = 0; c < kChunk; ++c) {
        const int j = j0 + c;
        int a[4];  // rows g, g + 8 of the group: words w0 then w1
        F::words(ra, j, t, a[0], a[2]);
        F::words(rb, j, t, a[1], a[3]);
        const GroupScales wa = table[j * kTileRows + g], wb = table[j * kTileRows + g + 8];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          const int b0 = f[c][nt].b0, b1 = f[c][nt].b1;
          const float2 s0 = make_float2(f[c][nt].s.x, f[c][nt].s.y),
                       s1 = make_float2(f[c][nt].s.z, f[c][nt].s.w);
          if constexpr (F::kHalves) {
            int lo[4], hi[4];
            mma_s8_k16(lo, a[0], a[1], b0);
            mma_s8_k16(hi, a[2], a[3], b1);
            if (j >= n_groups) continue;
            acc[nt][0] +=
                s0.x * (wa.lo * static_cast<float>(lo[0]) + wa.hi * static_cast<float>(hi[0]));
            acc[nt][1] +=
                s1.x * (wa.lo * static_cast<float>(lo[1]) + wa.hi * static_cast<float>(hi[1]));
            acc[nt][2] +=
                s0.x * (wb.lo * static_cast<float>(lo[2]) + wb.hi * static_cast<float>(hi[2]));
            acc[nt][3] +=
                s1.x * (wb.lo * static_cast<float>(lo[3]) + wb.hi * static_cast<float>(hi[3]));
          } else {
            int cc[4];
            mma_s8_k32(cc, a, b0, b1);
            if (j >= n_groups) continue;
            acc[nt][0] += s0.x * wa.lo * static_cast<float>(cc[0]);
            acc[nt][1] += s1.x * wa.lo * static_cast<float>(cc[1]);
            acc[nt][2] += s0.x * wb.lo * static_cast<float>(cc[2]);
            acc[nt][3] += s1.x * wb.lo * static_cast<float>(cc[3]);
            if constexpr (F::kMins) {
              acc[nt][0] -= wa.mn * s0.y;
              acc[nt][1] -= wa.mn * s1.y;
              acc[nt][2] -= wb.mn * s0.y;
              acc[nt][3] -= wb.mn * s1.y;
            }
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with its slots: the partial sums take their place

  // [kWarps][kTileRows][kNT * 8] partial sums, then summed over the warps in a fixed order.
  constexpr int kCols = kNT * 8;
  float* part = reinterpret_cast<float*>(smem) + warp * kTileRows * kCols;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    part[g * kCols + nt * 8 + 2 * t] = acc[nt][0];
    part[g * kCols + nt * 8 + 2 * t + 1] = acc[nt][1];
    part[(g + 8) * kCols + nt * 8 + 2 * t] = acc[nt][2];
    part[(g + 8) * kCols + nt * 8 + 2 * t + 1] = acc[nt][3];
  }
  __syncthreads();
  const float* all = reinterpret_cast<const float*>(smem);
  for (int idx = static_cast<int>(threadIdx.x); idx < kTileRows * kCols; idx += kWarps * 32) {
    const int r = idx % kTileRows, m = idx / kTileRows;
    if (m >= n || row0 + r >= rows) continue;
    float v = 0.0f;
#pragma unroll
    for (int k = 0; k < kWarps; ++k) v += all[(k * kTileRows + r) * kCols + m];
    y[std::int64_t{m} * ys + row0 + r] = v;
  }
}

// Per group of 32 columns of one activation row (rows n..n8-1 zero): one warp, one column a lane,
// the rule of launch_quantize_activations; consecutive warps take the rows of one group.
__global__ void quantize_mma_activations_kernel(const float* __restrict__ x, std::int64_t xs,
                                                std::int32_t n, std::int32_t n8, std::int32_t cols,
                                                std::int8_t* __restrict__ codes,
                                                float2* __restrict__ scales) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t w = (std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  if (w >= std::int64_t{n8} * (cols / kQuantGroup)) return;  // whole warps leave together
  const int lane = threadIdx.x % 32;
  const std::int64_t group = w / n8, m = w % n8;
  quantize_group(m < n ? x[m * xs + group * kQuantGroup + lane] : 0.0f, lane, &codes[w * kQuantGroup + lane],
                 &scales[w]);
}

constexpr std::int64_t rows8(std::int64_t n) {
  return (n + 7) / 8 * 8;
}

template <GgmlType T, int kNT>
void launch_typed(const QuantTarget* targets, int n_targets, QuantActivations a, std::int64_t n,
                  cudaStream_t s) {
  constexpr int kSmem = smem_bytes<T, kNT>();
  static const bool configured = [] {  // once per instantiation, before its first launch
    AKV_CUDA_CHECK(cudaFuncSetAttribute(quant_mma_kernel<T, kNT>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)configured;
  const QuantLaunchTargets tg = launch_targets(targets, n_targets, kTileRows);
  const QuantWeight& w = targets[0].w;
  launch(quant_mma_kernel<T, kNT>, dim3(static_cast<unsigned>(tg.blocks)), dim3(kWarps * 32), kSmem, s,
         tg, quant_row_bytes(w.type, w.cols), static_cast<std::int32_t>(w.cols),
         static_cast<const std::int8_t*>(a.codes), reinterpret_cast<const float2*>(a.scales),
         static_cast<std::int32_t>(n), static_cast<std::int32_t>(rows8(n)));
}

template <GgmlType T>
void launch_rows(const QuantTarget* targets, int n_targets, QuantActivations a, std::int64_t n,
                 cudaStream_t s) {
  if (n <= 8) return launch_typed<T, 1>(targets, n_targets, a, n, s);
  if (n <= 16) return launch_typed<T, 2>(targets, n_targets, a, n, s);
  if (n <= 32) return launch_typed<T, 4>(targets, n_targets, a, n, s);
  return launch_typed<T, 8>(targets, n_targets, a, n, s);
}

}  // namespace

std::size_t quant_mma_activation_bytes(std::int64_t n, std::int64_t cols) {
  return quant_activation_bytes(rows8(n), cols);
}

QuantActivations quant_mma_activations_in(void* scratch, std::int64_t n, std::int64_t cols) {
  return quant_activations_in(scratch, rows8(n), cols);
}

void launch_quantize_mma_activations(const float* x, std::int64_t x_stride, std::int64_t n,
                                     std::int64_t cols, QuantActivations a, cudaStream_t s) {
  AKV_CHECK(cols % kQuantGroup == 0, "quantized activations: cols a multiple of 32");
  if (n == 0 || cols == 0) return;
  constexpr int kThreads = 256;
  const std::int64_t threads = rows8(n) * cols;  // one per element, whole warps per group
  launch(quantize_mma_activations_kernel, dim3(blocks_for(threads, kThreads)), dim3(kThreads), 0, s,
         x, x_stride, static_cast<std::int32_t>(n), static_cast<std::int32_t>(rows8(n)),
         static_cast<std::int32_t>(cols), a.codes, reinterpret_cast<float2*>(a.scales));
}

bool quant_mma_supports(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

void launch_quant_mma_multi(const QuantTarget* targets, int n_targets, QuantActivations a,
                            std::int64_t n, cudaStream_t s) {
  AKV_CHECK(n >= 1 && n <= kQuantMmaMaxRows, "quantized MMA: 1 to 64 rows");
  AKV_CHECK(n_targets >= 1 && n_targets <= kQuantGemvMaxTargets, "quantized MMA: 1 to 3 targets");
  const QuantWeight& w0 = targets[0].w;
  for (int t = 0; t < n_targets; ++t) {
    const QuantWeight& w = targets[t].w;
    AKV_CHECK(w.type == w0.type && w.cols == w0.cols,
              "quantized MMA: one type and width per launch");
    AKV_CHECK(reinterpret_cast<std::uintptr_t>(w.data) % 16 == 0,
              "quantized MMA: 16-byte aligned weight");
    AKV_CHECK(w.rows < (std::int64_t{1} << 31) && w.cols < (std::int64_t{1} << 31),
              "quantized MMA: shape");
  }
  switch (w0.type) {
    case GgmlType::Q8_0:
      return launch_rows<GgmlType::Q8_0>(targets, n_targets, a, n, s);
    case GgmlType::Q4_0:
      return launch_rows<GgmlType::Q4_0>(targets, n_targets, a, n, s);
    case GgmlType::Q4_K:
      return launch_rows<GgmlType::Q4_K>(targets, n_targets, a, n, s);
    case GgmlType::Q5_K:
      return launch_rows<GgmlType::Q5_K>(targets, n_targets, a, n, s);
    case GgmlType::Q6_K:
      return launch_rows<GgmlType::Q6_K>(targets, n_targets, a, n, s);
    default:
      AKV_CHECK(false, "quantized MMA: unsupported type");
  }
}

}  // namespace akv::cuda
