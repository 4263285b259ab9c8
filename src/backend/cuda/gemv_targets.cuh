// The weights of one multi-target decode matmul launch (q/k/v, gate/up) as a kernel parameter,
// and how a block finds its target: shared by the GEMV (gemv.cu) and the skinny GEMM
// (skinny_gemm.cu). Not a launcher: each kernel decides how many rows of w a block owns.
#pragma once

#include <cstdint>
#include <span>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"

namespace akv::cuda {

// The target of one block: y[t * ys + row] = x[t, :] . w[row, :] for row < m; the target's
// blocks start at first_block.
template <typename W>
struct GemvTarget {
  const W* w;  // [m, k]
  float* y;
  std::int64_t ys;
  std::int32_t m;
  std::int32_t first_block;
};

// Up to kGemvMaxTargets weights of one dtype and width, passed by value; blocks
// [first_block[j], first_block[j + 1]) belong to target j.
template <typename W>
struct GemvTargets {
  const W* w[kGemvMaxTargets];
  float* y[kGemvMaxTargets];
  std::int64_t ys[kGemvMaxTargets];
  std::int32_t m[kGemvMaxTargets];
  std::int32_t first_block[kGemvMaxTargets + 1];
  int count;

  __device__ __forceinline__ GemvTarget<W> target_of(std::int32_t block) const {
    int j = 0;
#pragma unroll
    for (int i = 1; i < kGemvMaxTargets; ++i)
      if (i < count && block >= first_block[i]) j = i;
    const W* tw = nullptr;
    float* ty = nullptr;
    std::int64_t tys = 0;
    std::int32_t tm = 0, tfirst = 0;
#pragma unroll
    for (int i = 0; i < kGemvMaxTargets;
         ++i)  // constant indices keep the parameters out of local memory
      if (i == j) {
        tw = w[i];
        ty = y[i];
        tys = ys[i];
        tm = m[i];
        tfirst = first_block[i];
      }
    return {tw, ty, tys, tm, tfirst};
  }
};

// The targets of `outs` (1 to kGemvMaxTargets, weights of dtype W) with rows_per_block rows of w
// per block; first_block[count] is the grid's block count (checked < 2^31).
template <typename W>
GemvTargets<W> make_gemv_targets(std::span<const GemvOutput> outs, int rows_per_block) {
  GemvTargets<W> set{};
  set.count = static_cast<int>(outs.size());
  std::int64_t blocks = 0;
  for (int i = 0; i < set.count; ++i) {
    set.w[i] = static_cast<const W*>(outs[i].w->data);
    set.y[i] = static_cast<float*>(outs[i].out.data);
    set.ys[i] = outs[i].out.stride;
    set.m[i] = static_cast<std::int32_t>(outs[i].w->rows);
    set.first_block[i] = static_cast<std::int32_t>(blocks);
    blocks += blocks_for(outs[i].w->rows, rows_per_block);
  }
  AKV_CHECK(blocks < (1ll << 31), "gemv: too many blocks");
  set.first_block[set.count] = static_cast<std::int32_t>(blocks);
  return set;
}

}  // namespace akv::cuda
