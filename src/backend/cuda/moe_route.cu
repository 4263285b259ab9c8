// MoE routing on the device, one warp per token: k rounds of a warp arg-max over the router
// logits (each lane holds every 32nd expert, in as many slots as the expert count needs: 4 for
// 128 experts, not the 32 of the largest count), then the weights of the chosen k. Same picks as
// route_experts (moe.h): the largest logit not yet taken, ties to the lower id.
#include <cfloat>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/moe_device.cuh"
#include "backend/cuda/moe_kernels.h"

namespace akv::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxPerLane = kMoeMaxExperts / 32;

// (value, id) a beats (value, id) b: a larger value, or the same value and a lower id; id < 0 loses.
__device__ __forceinline__ bool beats(float va, int ia, float vb, int ib) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  return va > vb || (va == vb && ia < ib);
}

template <int kPerLane>  // expert slots per lane: n_experts <= 32 * kPerLane
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    moe_route_kernel(const float* logits, std::int64_t logits_stride, float* route, std::int64_t route_stride,
                     int n, DeviceMoe m) {
  pdl_trigger();
  pdl_wait();
  const int t = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (t >= n) return;
  const float* l = logits + t * logits_stride;
  float v[kPerLane];
  std::uint32_t taken = 0;  // bit i: expert lane + 32 i is chosen
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    v[i] = e < m.n_experts ? l[e] : -FLT_MAX;
  }
  float my_value = 0.0f;  // lane r < top_k: the logit chosen in round r
  int my_id = 0;
  for (int r = 0; r < m.top_k; ++r) {
    float best_v = 0.0f;
    int best_i = -1;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + 32 * i;
      if (e < m.n_experts && !(taken >> i & 1u) && beats(v[i], e, best_v, best_i)) {
        best_v = v[i];
        best_i = e;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best_v, o);
      const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
      if (beats(ov, oi, best_v, best_i)) {
        best_v = ov;
        best_i = oi;
      }
    }
    if (best_i % 32 == lane) taken |= 1u << (best_i / 32);
    if (lane == r) {
      my_value = best_v;
      my_id = best_i;
    }
  }
  const float top = __shfl_sync(0xffffffffu, my_value, 0);
  const float mine = lane < m.top_k ? expf(my_value - top) : 0.0f;
  float denom = warp_sum(mine);
  if (m.gating == static_cast<int>(MoeGating::SoftmaxTopK) && !m.norm_topk_prob) {
    float all = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (lane + 32 * i < m.n_experts) all += expf(v[i] - top);
    denom = warp_sum(all);
  }
  float* out = route + t * route_stride;
  if (lane < m.top_k) {
    out[lane] = static_cast<float>(my_id);
    out[m.top_k + lane] = mine / denom;
  }
}

}  // namespace

void launch_moe_route(TensorRef logits, const MoeParams& p, TensorRef route, Stream s) {
  AKV_CHECK(p.n_experts <= kMoeMaxExperts && p.top_k <= 32, "moe route: at most 1024 experts and 32 choices");
  const int n = static_cast<int>(logits.rows);
  const auto run = [&](auto kernel) {
    launch(kernel, dim3(blocks_for(n, kWarpsPerBlock)), kWarpsPerBlock * 32, 0, s,
           static_cast<const float*>(logits.data), logits.stride, static_cast<float*>(route.data), route.stride, n,
           device_moe(p, 0));
  };
  static_assert(kMaxPerLane == 32, "the slot counts below end at kMoeMaxExperts");
  if (p.n_experts <= 32)
    run(moe_route_kernel<1>);
  else if (p.n_experts <= 64)
    run(moe_route_kernel<2>);
  else if (p.n_experts <= 128)
    run(moe_route_kernel<4>);
  else if (p.n_experts <= 256)
    run(moe_route_kernel<8>);
  else if (p.n_experts <= 512)
    run(moe_route_kernel<16>);
  else
    run(moe_route_kernel<32>);
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
