// Device helpers of the tensor-core kernels (sm_80+): mma.sync m16n8k16 bf16, bf16 packing and
// hi/lo splitting, shared-memory addresses, cp.async, exp2.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace akv::cuda {

// c[4] += a[4] (m16k16 A fragment) x (b0, b1) (k16n8 B fragment), f32 accumulators.
__device__ __forceinline__ void mma_bf16(float* c, const std::uint32_t* a, std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

// (lo, hi) as bf16 pairs big + small with big + small = the f32 pair to ~2^-16: two products
// on the tensor cores keep f32-level accuracy for an f32 operand.
__device__ __forceinline__ void split_bf16(float lo, float hi, std::uint32_t& big, std::uint32_t& small) {
  const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
  big = *reinterpret_cast<const std::uint32_t*>(&b);
  const float2 r = __bfloat1622float2(b);
  const __nv_bfloat162 s = __floats2bfloat162_rn(lo - r.x, hi - r.y);
  small = *reinterpret_cast<const std::uint32_t*>(&s);
}

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kN>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kN) : "memory");
}

constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float fast_exp2(float x) {  // exp2(-inf) = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace akv::cuda
