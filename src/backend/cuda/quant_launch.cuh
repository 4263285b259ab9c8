// What the quantized matmul kernels (quant_gemv.cu, quant_mma.cu) share: the weights of one
// launch, up to kQuantGemvMaxTargets of one type and width (q/k/v, gate/up), target t taking the
// grid's blocks [first_block[t], first_block[t + 1]); and the activations' quantization rule.
#pragma once

#include <cstdint>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/quant_gemv.h"
#include "base/check.h"

namespace akv::cuda {

struct QuantLaunchTargets {
  const std::uint8_t* w[kQuantGemvMaxTargets];
  float* y[kQuantGemvMaxTargets];
  std::int64_t ys[kQuantGemvMaxTargets];
  std::int32_t rows[kQuantGemvMaxTargets];
  std::int32_t first_block[kQuantGemvMaxTargets + 1];
  int count;
  std::int64_t blocks;  // the grid
};

// `targets` with `rows_per_block` weight rows a block.
inline QuantLaunchTargets launch_targets(const QuantTarget* targets, int n_targets, std::int64_t rows_per_block) {
  QuantLaunchTargets tg{};
  tg.count = n_targets;
  for (int t = 0; t < n_targets; ++t) {
    tg.w[t] = static_cast<const std::uint8_t*>(targets[t].w.data);
    tg.y[t] = targets[t].y;
    tg.ys[t] = targets[t].y_stride;
    tg.rows[t] = static_cast<std::int32_t>(targets[t].w.rows);
    tg.first_block[t] = static_cast<std::int32_t>(tg.blocks);
    tg.blocks += blocks_for(targets[t].w.rows, static_cast<int>(rows_per_block));
  }
  AKV_CHECK(tg.blocks < (std::int64_t{1} << 31), "quantized matmul: grid");
  tg.first_block[n_targets] = static_cast<std::int32_t>(tg.blocks);
  return tg;
}

// What the calling block works on: its target's weight, output (row stride ys) and rows, and its
// index among that target's blocks.
struct BlockTarget {
  const std::uint8_t* w;
  float* y;
  std::int64_t ys;
  std::int32_t rows, block;
};
// Static indices only, so that `tg` (a kernel parameter) stays in the constant bank.
__device__ __forceinline__ BlockTarget block_target(const QuantLaunchTargets& tg) {
  const auto b = static_cast<std::int32_t>(blockIdx.x);
  BlockTarget r{tg.w[0], tg.y[0], tg.ys[0], tg.rows[0], b};
#pragma unroll
  for (int t = 1; t < kQuantGemvMaxTargets; ++t)
    if (t < tg.count && b >= tg.first_block[t]) r = {tg.w[t], tg.y[t], tg.ys[t], tg.rows[t], b - tg.first_block[t]};
  return r;
}

// The kQuantGroup-column group of an activation matrix [n, cols] that this thread's warp takes
// (grid-wide warp index = group index; one column a lane): false past the last group (whole
// warps leave together).
struct WarpGroup {
  std::int64_t group, row, col;  // col: this lane's column
  int lane;
};
__device__ __forceinline__ bool warp_group(std::int32_t n, std::int32_t cols, WarpGroup& wg) {
  const std::int32_t groups = cols / kQuantGroup;
  wg.group = (std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  if (wg.group >= std::int64_t{n} * groups) return false;
  wg.lane = static_cast<int>(threadIdx.x % 32);
  wg.row = wg.group / groups;
  wg.col = (wg.group % groups) * kQuantGroup + wg.lane;
  return true;
}

// One group of kQuantGroup activations, one a lane of a warp (all 32 call it): the lane's int8
// code to `code` and, from lane 0, (d, d * the sum of the group's codes) to `scale`, by the rule
// QuantActivations states (quant_gemv.h).
__device__ __forceinline__ void quantize_group(float v, int lane, std::int8_t* code, float2* scale) {
  const float amax = warp_max(fabsf(v));
  const float d = amax / 127.0f;
  const int q = amax == 0.0f ? 0 : __float2int_rn(v / d);
  *code = static_cast<std::int8_t>(q);
  int sum = q;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) *scale = make_float2(d, d * static_cast<float>(sum));
}

}  // namespace akv::cuda
