// Device pieces every MoE kernel shares (moe.cu, moe_decode.cu, moe_prefill.cu): the layer's
// parameters as kernel arguments, the per-element activation, bias reads, MXFP4 values.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/moe.h"

namespace akv::cuda {

struct DeviceMoe {
  int n_experts, top_k, inter, hidden;
  int gating;  // MoeGating
  bool norm_topk_prob;
  int act;  // ExpertActivation
  float limit, alpha;
  bool interleaved;
};

inline DeviceMoe device_moe(const MoeParams& p, std::int64_t hidden) {
  return {static_cast<int>(p.n_experts), static_cast<int>(p.top_k), static_cast<int>(p.inter),
          static_cast<int>(hidden),      static_cast<int>(p.gating), p.norm_topk_prob,
          static_cast<int>(p.act),       p.swiglu_limit,            p.swiglu_alpha,
          p.interleaved_gate_up};
}

// expert_activation (moe.h) on the device.
__device__ __forceinline__ float moe_activation(float g, float u, const DeviceMoe& m) {
  if (m.act == static_cast<int>(ExpertActivation::Silu)) return g / (1.0f + expf(-g)) * u;
  const float gc = fminf(g, m.limit), uc = fminf(fmaxf(u, -m.limit), m.limit);
  return (uc + 1.0f) * (gc / (1.0f + expf(-m.alpha * gc)));
}

// Element i of an optional bias vector (null: 0).
__device__ __forceinline__ float moe_bias_at(const void* b, DType dtype, std::int64_t i) {
  if (b == nullptr) return 0.0f;
  if (dtype == DType::BF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(b)[i]);
  if (dtype == DType::F16) return __half2float(static_cast<const __half*>(b)[i]);
  return static_cast<const float*>(b)[i];
}

// The value of an E8M0 scale byte, 2^(e - 127) (255: NaN), as mxfp4_scale_value (moe.h).
__device__ __forceinline__ float mxfp4_scale(std::uint8_t e) {
  if (e == 255) return __int_as_float(0x7fc00000);
  if (e == 0) return __int_as_float(0x00400000);  // 2^-127, the one subnormal
  return __int_as_float(static_cast<int>(e) << 23);
}

// The value of an E2M1 nibble (s e e m: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives), as
// mxfp4_e2m1_value (moe.h), built as f32 bits (no table: a per-thread array would live in local
// memory).
__device__ __forceinline__ float mxfp4_e2m1(int nibble) {
  const unsigned mag = static_cast<unsigned>(nibble) & 7u;
  const unsigned bits = mag < 2 ? (mag == 1 ? 126u << 23 : 0u) : (((mag >> 1) + 126u) << 23) | ((mag & 1u) << 22);
  return __uint_as_float(bits | ((static_cast<unsigned>(nibble) & 8u) << 28));
}

}  // namespace akv::cuda
