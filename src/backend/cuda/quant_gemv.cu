// The quantized GEMV (quant_gemv.h). A warp walks its weight rows (two for up to 8 activation
// rows, else one) in stages of 1,024 elements: each row's stage bytes come in with 16-byte
// asynchronous copies (cp.async) into a ring of kPipe shared-memory slots, kPipe - 1 stages in
// flight while one is used (a 4096-column Q4_K row is four stages: all of it is requested at
// once), then each lane decodes the 32 weight codes of its element group into eight packed int8
// words once and multiplies them with the int8 activation codes of every activation row (dp4a;
// one activation load for all the warp's rows), applying the block scales in f32. Each weight
// byte is read from memory once per launch, whatever n.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/quant_device.cuh"
#include "backend/cuda/quant_gemv.h"
#include "backend/cuda/quant_launch.cuh"
#include "backend/cuda/quant_lane.cuh"

namespace akv::cuda {
namespace {

using namespace quant;

constexpr int kWarps = 4;             // per block
constexpr int kStageElems = 32 * 32;  // 32 lanes x 32 elements
constexpr int kPipe = 3;              // shared-memory slots per row: stages in flight + the one in use
static_assert(kQuantGroup == 32, "a lane's element group is one activation group");

template <GgmlType T>
struct Stage {
  static constexpr int kBlocks = kStageElems / Geometry<T>::kElems;
  static constexpr int kBytes = kBlocks * Geometry<T>::kBytes;
  // 16-byte words covering kBytes from any 16-byte-aligned-down start.
  static constexpr int kWords = kBytes / 16 + 2;
  static constexpr int kWordsPerLane = (kWords + 31) / 32;
  static constexpr int kSlotBytes = kWords * 16 + 16;  // + slack for ld_u32 past the end
  static_assert(kSlotBytes % 16 == 0, "slots stay 16-byte aligned");
};

// Grid, kSplit false (QuantGemvForm::WarpRows): each warp takes kR consecutive weight rows
// (kWarps * kR rows per block) of its block's target and walks all their stages in step, so each
// activation load feeds kR rows. kSplit true (QuantGemvForm::BlockStages): the block's warps share
// kR rows, warp w taking stages w, w + kWarps, ...; their sums meet in shared memory (in warp
// order: deterministic). kM >= n activation rows.
// The body: block `bt` of a launch over weights of type T (rows row_bytes apart), its warps' rings
// in `slots` (kSlot >= Stage<T>::kSlotBytes bytes a slot).
template <GgmlType T, int kM, int kR, bool kSplit, int kSlot>
__device__ __forceinline__ void gemv_block(const BlockTarget& bt, std::int64_t row_bytes,
                                           std::int32_t cols, const std::int8_t* __restrict__ codes,
                                           const float2* __restrict__ scales, std::int32_t n,
                                           std::uint8_t (*slots)[kPipe][kR][kSlot]) {
  using S = Stage<T>;
  using G = Geometry<T>;
  static_assert(kSlot >= S::kSlotBytes, "a slot holds a stage");
  const std::uint8_t* __restrict__ w = bt.w;
  float* __restrict__ y = bt.y;
  const std::int64_t ys = bt.ys;
  const std::int32_t rows = bt.rows, block = bt.block;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const std::int32_t row0 = kSplit ? block * kR : (block * kWarps + warp) * kR;
  if (row0 >= rows) return;  // the whole warp (kSplit: the whole block): no barrier waits for it
  const std::int32_t row_blocks = cols / G::kElems;
  const std::int32_t n_stages = (row_blocks + S::kBlocks - 1) / S::kBlocks;
  // This warp's stages: i-th is stage_of(i), i < my_stages.
  const std::int32_t first = kSplit ? warp : 0, step = kSplit ? kWarps : 1;
  const std::int32_t my_stages = n_stages > first ? (n_stages - first + step - 1) / step : 0;
  auto stage_of = [&](std::int32_t i) { return first + i * step; };
  const std::uint8_t* row_ptr[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) row_ptr[r] = w + min(row0 + r, rows - 1) * row_bytes;  // past the end: a repeat

  // Where row r's stage st begins in its slot: its bytes are copied from the 16-byte word
  // holding their first byte.
  auto skew = [&](int r, std::int32_t st) {
    return static_cast<int>(reinterpret_cast<std::uintptr_t>(row_ptr[r] + std::int64_t{st} * S::kBytes) & 15);
  };
  // Requests this warp's i-th stage of every row into slot i % kPipe; one commit group per stage
  // (empty past the last), so a wait for "all but the newest kPipe - 2 groups" means it landed.
  auto request = [&](std::int32_t i) {
    if (i < my_stages) {
      const std::int32_t st = stage_of(i);
      const int bytes = min(S::kBlocks, row_blocks - st * S::kBlocks) * G::kBytes;
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const std::uint8_t* base = row_ptr[r] + std::int64_t{st} * S::kBytes - skew(r, st);
        const int n_words = (skew(r, st) + bytes + 15) / 16;
        std::uint8_t* slot = slots[warp][i % kPipe][r];
#pragma unroll
        for (int u = 0; u < S::kWordsPerLane; ++u) {
          const int i = lane + 32 * u;
          if (i < n_words) cp_async16(slot + 16 * i, base + 16 * i);
        }
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int i = 0; i < kPipe - 1; ++i) request(i);
  pdl_wait();  // activations come from the kernel before

  float acc[kR][kM];
#pragma unroll
  for (int r = 0; r < kR; ++r)
#pragma unroll
    for (int m = 0; m < kM; ++m) acc[r][m] = 0.0f;
  const std::int32_t groups = cols / kQuantGroup;
  for (std::int32_t i = 0; i < my_stages; ++i) {
    cp_async_wait<kPipe - 2>();  // this lane's copies of stage i are in
    __syncwarp();                // and every lane's; the slot refilled next was last read before
    request(i + kPipe - 1);
    const std::int32_t st = stage_of(i);
    const std::int32_t group = st * (kStageElems / kQuantGroup) + lane;
    if (group >= groups) continue;  // past the row's end in its last stage
    LaneWeights lw[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) lw[r] = decode<T>(slots[warp][i % kPipe][r] + skew(r, st), lane);
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      if (m >= n) break;
      const int4* xq = reinterpret_cast<const int4*>(codes + std::int64_t{m} * cols + std::int64_t{group} * kQuantGroup);
      const int4 a = __ldg(xq), b = __ldg(xq + 1);
      const float2 ds = __ldg(scales + std::int64_t{m} * groups + group);
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        int dot_lo = __dp4a(lw[r].q[0], a.x, 0);
        dot_lo = __dp4a(lw[r].q[1], a.y, dot_lo);
        dot_lo = __dp4a(lw[r].q[2], a.z, dot_lo);
        dot_lo = __dp4a(lw[r].q[3], a.w, dot_lo);
        int dot_hi = __dp4a(lw[r].q[4], b.x, 0);
        dot_hi = __dp4a(lw[r].q[5], b.y, dot_hi);
        dot_hi = __dp4a(lw[r].q[6], b.z, dot_hi);
        dot_hi = __dp4a(lw[r].q[7], b.w, dot_hi);
        acc[r][m] += ds.x * (lw[r].lo * static_cast<float>(dot_lo) + lw[r].hi * static_cast<float>(dot_hi)) -
                     lw[r].mn * ds.y;
      }
    }
  }
  cp_async_wait<0>();
  // kSplit: each warp's sums go to the start of its own first slot (its copies have landed and
  // its lanes are done reading it).
  __syncwarp();
#pragma unroll
  for (int r = 0; r < kR; ++r) {
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      if (m >= n) break;
      const float v = warp_sum(acc[r][m]);
      if constexpr (kSplit) {
        if (lane == 0) reinterpret_cast<float*>(slots[warp][0][0])[r * kM + m] = v;
      } else if (lane == m % 32 && row0 + r < rows) {
        y[std::int64_t{m} * ys + row0 + r] = v;
      }
    }
  }
  if constexpr (kSplit) {
    __syncthreads();
    const int r = static_cast<int>(threadIdx.x) / kM, m = static_cast<int>(threadIdx.x) % kM;
    if (r < kR && m < n && row0 + r < rows) {
      float v = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) v += reinterpret_cast<const float*>(slots[w][0][0])[r * kM + m];
      y[std::int64_t{m} * ys + row0 + r] = v;
    }
  }
}

template <GgmlType T, int kM, int kR, bool kSplit>
__global__ void __launch_bounds__(kWarps * 32)
    quant_gemv_kernel(QuantLaunchTargets tg, std::int64_t row_bytes, std::int32_t cols,
                      const std::int8_t* __restrict__ codes, const float2* __restrict__ scales,
                      std::int32_t n) {
  constexpr int kSlot = Stage<T>::kSlotBytes;
  __shared__ __align__(16) std::uint8_t slots[kWarps][kPipe][kR][kSlot];
  pdl_trigger();
  gemv_block<T, kM, kR, kSplit, kSlot>(block_target(tg), row_bytes, cols, codes, scales, n, slots);
}

// Targets of two types in one launch (WarpRows form): blocks before split_block read T1 weights
// (rows row_bytes1 apart), the others T2. Each block runs exactly what quant_gemv_kernel would
// for its rows, so the outputs are those of one launch per type.
template <GgmlType T1, GgmlType T2, int kM, int kR>
__global__ void __launch_bounds__(kWarps * 32)
    quant_gemv_mixed_kernel(QuantLaunchTargets tg, std::int32_t split_block,
                            std::int64_t row_bytes1, std::int64_t row_bytes2, std::int32_t cols,
                            const std::int8_t* __restrict__ codes,
                            const float2* __restrict__ scales, std::int32_t n) {
  constexpr int kSlot =
      Stage<T1>::kSlotBytes > Stage<T2>::kSlotBytes ? Stage<T1>::kSlotBytes : Stage<T2>::kSlotBytes;
  __shared__ __align__(16) std::uint8_t slots[kWarps][kPipe][kR][kSlot];
  pdl_trigger();
  const BlockTarget bt = block_target(tg);
  if (static_cast<std::int32_t>(blockIdx.x) < split_block)
    gemv_block<T1, kM, kR, false, kSlot>(bt, row_bytes1, cols, codes, scales, n, slots);
  else
    gemv_block<T2, kM, kR, false, kSlot>(bt, row_bytes2, cols, codes, scales, n, slots);
}

// Per group of 32 columns: one warp, one column a lane.
__global__ void quantize_activations_kernel(const float* __restrict__ x, std::int64_t xs, std::int32_t n,
                                            std::int32_t cols, std::int8_t* __restrict__ codes,
                                            float2* __restrict__ scales) {
  pdl_trigger();
  pdl_wait();
  WarpGroup w;
  if (!warp_group(n, cols, w)) return;
  quantize_group(x[w.row * xs + w.col], w.lane, &codes[w.row * cols + w.col], &scales[w.group]);
}

// Rows per warp: two while the accumulators (kR x kM) stay few, one beyond.
constexpr int rows_per_warp(int m) { return m <= 8 ? 2 : 1; }

template <GgmlType T, int kM, bool kSplit = false>
void launch_typed(const QuantTarget* targets, int n_targets, QuantActivations a, std::int64_t n, cudaStream_t s) {
  constexpr int kR = rows_per_warp(kM);
  constexpr int kBlockRows = kSplit ? kR : kWarps * kR;
  const QuantLaunchTargets tg = launch_targets(targets, n_targets, kBlockRows);
  const QuantWeight& w = targets[0].w;
  launch(quant_gemv_kernel<T, kM, kR, kSplit>, dim3(static_cast<unsigned>(tg.blocks)), dim3(kWarps * 32), 0, s, tg,
         quant_row_bytes(w.type, w.cols), static_cast<std::int32_t>(w.cols), static_cast<const std::int8_t*>(a.codes),
         reinterpret_cast<const float2*>(a.scales), static_cast<std::int32_t>(n));
}

template <GgmlType T>
void launch_rows(const QuantTarget* targets, int n_targets, QuantActivations a, std::int64_t n, QuantGemvForm form,
                 cudaStream_t s) {
  if (n <= 1) {
    if (form == QuantGemvForm::Auto)
      form = quant_row_bytes(T, targets[0].w.cols) >= kQuantGemvSplitRowBytes ? QuantGemvForm::BlockStages
                                                                               : QuantGemvForm::WarpRows;
    return form == QuantGemvForm::BlockStages ? launch_typed<T, 1, true>(targets, n_targets, a, n, s)
                                              : launch_typed<T, 1>(targets, n_targets, a, n, s);
  }
  if (n <= 2) return launch_typed<T, 2>(targets, n_targets, a, n, s);
  if (n <= 4) return launch_typed<T, 4>(targets, n_targets, a, n, s);
  if (n <= 8) return launch_typed<T, 8>(targets, n_targets, a, n, s);
  if (n <= 16) return launch_typed<T, 16>(targets, n_targets, a, n, s);
  if (n <= 32) return launch_typed<T, 32>(targets, n_targets, a, n, s);
  return launch_typed<T, 64>(targets, n_targets, a, n, s);
}

template <GgmlType T1, GgmlType T2, int kM>
void launch_mixed_typed(const QuantTarget* targets, int n_targets, int n_first, QuantActivations a,
                        std::int64_t n, cudaStream_t s) {
  constexpr int kR = rows_per_warp(kM);
  const QuantLaunchTargets tg = launch_targets(targets, n_targets, kWarps * kR);
  const std::int64_t cols = targets[0].w.cols;
  launch(quant_gemv_mixed_kernel<T1, T2, kM, kR>, dim3(static_cast<unsigned>(tg.blocks)),
         dim3(kWarps * 32), 0, s, tg, tg.first_block[n_first], quant_row_bytes(T1, cols),
         quant_row_bytes(T2, cols), static_cast<std::int32_t>(cols),
         static_cast<const std::int8_t*>(a.codes), reinterpret_cast<const float2*>(a.scales),
         static_cast<std::int32_t>(n));
}

template <GgmlType T1, GgmlType T2>
void launch_mixed_rows(const QuantTarget* targets, int n_targets, int n_first, QuantActivations a,
                       std::int64_t n, cudaStream_t s) {
  if (n <= 1) return launch_mixed_typed<T1, T2, 1>(targets, n_targets, n_first, a, n, s);
  if (n <= 2) return launch_mixed_typed<T1, T2, 2>(targets, n_targets, n_first, a, n, s);
  return launch_mixed_typed<T1, T2, 4>(targets, n_targets, n_first, a, n, s);
}

constexpr std::size_t align16(std::size_t b) { return (b + 15) & ~std::size_t{15}; }

}  // namespace

bool quant_kernels_support(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::MXFP4:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K: return true;
    default: return false;
  }
}

std::int64_t quant_row_bytes(GgmlType t, std::int64_t cols) {
  const GgmlTypeTraits tr = ggml_type_traits(t);
  AKV_CHECK(tr.quantized && cols % tr.block_elems == 0, "quantized row: a whole number of blocks");
  return cols / tr.block_elems * tr.block_bytes;
}

std::size_t quant_activation_bytes(std::int64_t n, std::int64_t cols) {
  const auto elems = static_cast<std::size_t>(n * cols);
  return align16(elems) + elems / kQuantGroup * sizeof(float2);
}

QuantActivations quant_activations_in(void* scratch, std::int64_t n, std::int64_t cols) {
  auto* p = static_cast<std::uint8_t*>(scratch);
  return {reinterpret_cast<std::int8_t*>(p), reinterpret_cast<float*>(p + align16(static_cast<std::size_t>(n * cols)))};
}

void launch_quantize_activations(const float* x, std::int64_t x_stride, std::int64_t n, std::int64_t cols,
                                 QuantActivations a, cudaStream_t s) {
  AKV_CHECK(cols % kQuantGroup == 0, "quantized activations: cols a multiple of 32");
  if (n == 0 || cols == 0) return;
  constexpr int kThreads = 256;
  const std::int64_t threads = n * cols;  // one per element, whole warps per group
  launch(quantize_activations_kernel, dim3(blocks_for(threads, kThreads)), dim3(kThreads), 0, s, x, x_stride,
         static_cast<std::int32_t>(n), static_cast<std::int32_t>(cols), a.codes,
         reinterpret_cast<float2*>(a.scales));
}

void launch_quant_gemv(const QuantWeight& w, QuantActivations a, std::int64_t n, float* y, std::int64_t y_stride,
                       cudaStream_t s, QuantGemvForm form) {
  const QuantTarget t{w, y, y_stride};
  launch_quant_gemv_multi(&t, 1, a, n, s, form);
}

void launch_quant_gemv_multi(const QuantTarget* targets, int n_targets, QuantActivations a, std::int64_t n,
                             cudaStream_t s, QuantGemvForm form) {
  AKV_CHECK(n >= 1 && n <= kQuantGemvMaxRows, "quantized GEMV: 1 to 64 rows");
  AKV_CHECK(n_targets >= 1 && n_targets <= kQuantGemvMaxTargets, "quantized GEMV: 1 to 3 targets");
  const QuantWeight& w0 = targets[0].w;
  for (int t = 0; t < n_targets; ++t) {
    const QuantWeight& w = targets[t].w;
    AKV_CHECK(w.type == w0.type && w.cols == w0.cols, "quantized GEMV: one type and width per launch");
    AKV_CHECK(reinterpret_cast<std::uintptr_t>(w.data) % 16 == 0, "quantized GEMV: 16-byte aligned weight");
    AKV_CHECK(w.rows < (std::int64_t{1} << 31) && w.cols < (std::int64_t{1} << 31), "quantized GEMV: shape");
  }
  switch (w0.type) {
    case GgmlType::Q8_0: return launch_rows<GgmlType::Q8_0>(targets, n_targets, a, n, form, s);
    case GgmlType::Q4_0: return launch_rows<GgmlType::Q4_0>(targets, n_targets, a, n, form, s);
    case GgmlType::MXFP4: return launch_rows<GgmlType::MXFP4>(targets, n_targets, a, n, form, s);
    case GgmlType::Q4_K: return launch_rows<GgmlType::Q4_K>(targets, n_targets, a, n, form, s);
    case GgmlType::Q5_K: return launch_rows<GgmlType::Q5_K>(targets, n_targets, a, n, form, s);
    case GgmlType::Q6_K: return launch_rows<GgmlType::Q6_K>(targets, n_targets, a, n, form, s);
    default: AKV_CHECK(false, "quantized GEMV: unsupported type");
  }
}

bool quant_gemv_mixes(GgmlType first, GgmlType second, std::int64_t cols, std::int64_t n) {
  const bool pair =
      second == GgmlType::Q6_K && (first == GgmlType::Q4_K || first == GgmlType::Q5_K);
  if (!pair || n < 1 || n > kQuantGemvMixedMaxRows) return false;
  // One row: Auto's form must be WarpRows for both (rows under kQuantGemvSplitRowBytes).
  return n > 1 || (quant_row_bytes(first, cols) < kQuantGemvSplitRowBytes &&
                   quant_row_bytes(second, cols) < kQuantGemvSplitRowBytes);
}

void launch_quant_gemv_mixed(const QuantTarget* targets, int n_targets, int n_first,
                             QuantActivations a, std::int64_t n, cudaStream_t s) {
  AKV_CHECK(n_first >= 1 && n_first < n_targets && n_targets <= kQuantGemvMaxTargets,
            "mixed quantized GEMV: 2 or 3 targets of two types");
  const GgmlType t1 = targets[0].w.type, t2 = targets[n_first].w.type;
  const std::int64_t cols = targets[0].w.cols;
  AKV_CHECK(quant_gemv_mixes(t1, t2, cols, n),
            "mixed quantized GEMV: a pair of types and rows it takes");
  for (int t = 0; t < n_targets; ++t) {
    const QuantWeight& w = targets[t].w;
    AKV_CHECK(w.type == (t < n_first ? t1 : t2) && w.cols == cols,
              "mixed quantized GEMV: targets by type, one width");
    AKV_CHECK(reinterpret_cast<std::uintptr_t>(w.data) % 16 == 0,
              "quantized GEMV: 16-byte aligned weight");
    AKV_CHECK(w.rows < (std::int64_t{1} << 31) && w.cols < (std::int64_t{1} << 31),
              "quantized GEMV: shape");
  }
  if (t1 == GgmlType::Q4_K)
    return launch_mixed_rows<GgmlType::Q4_K, GgmlType::Q6_K>(targets, n_targets, n_first, a, n, s);
  return launch_mixed_rows<GgmlType::Q5_K, GgmlType::Q6_K>(targets, n_targets, n_first, a, n, s);
}

}  // namespace akv::cuda
