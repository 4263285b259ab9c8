// The 16-byte chunks the MoE decode kernels stream (moe_decode.cu, moe_decode_pipelined.cu): a
// chunk of an expert row of F32, BF16, F16 (4 or 8 values) or MXFP4 (32 values, one E8M0 scale),
// its load, its scale and its dot product with f32 values in shared memory.
#pragma once

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/moe_device.cuh"

namespace akv::cuda {

struct Mxfp4 {};  // tag: rows of MXFP4 blocks with E8M0 scales

// Values per 16-byte chunk of a row.
template <typename T>
constexpr int kPerChunk = 16 / sizeof(T);
template <>
constexpr int kPerChunk<Mxfp4> = 32;

template <typename T>
constexpr std::int64_t row_bytes(int cols) {
  return std::int64_t{cols} * static_cast<std::int64_t>(sizeof(T));
}
template <>
constexpr std::int64_t row_bytes<Mxfp4>(int cols) {
  return cols / 2;
}

// Chunk q of row `row` of a stacked expert matrix of width `cols`.
template <typename T>
__device__ __forceinline__ uint4 load_chunk(const void* w, std::int64_t row, int cols, int q) {
  return load_stream(static_cast<const char*>(w) + row * row_bytes<T>(cols) + std::int64_t{q} * 16);
}

// Its scale (MXFP4: the E8M0 byte of that 32-value block; else 1).
template <typename T>
__device__ __forceinline__ float chunk_scale(const std::uint8_t*, std::int64_t, int, int) {
  return 1.0f;
}
template <>
__device__ __forceinline__ float chunk_scale<Mxfp4>(const std::uint8_t* scales, std::int64_t row, int cols, int q) {
  return mxfp4_scale(scales[row * (cols / 32) + q]);
}

// The chunk's values dotted with xs[0, kPerChunk<T>) (shared memory, 16-byte aligned), unscaled.
template <typename T>
__device__ __forceinline__ float dot_chunk(uint4 raw, const float* xs, const float* lut);
template <>
__device__ __forceinline__ float dot_chunk<float>(uint4 raw, const float* xs, const float*) {
  const float4 x = *reinterpret_cast<const float4*>(xs);
  return __uint_as_float(raw.x) * x.x + __uint_as_float(raw.y) * x.y + __uint_as_float(raw.z) * x.z +
         __uint_as_float(raw.w) * x.w;
}
__device__ __forceinline__ float2 pair_to_float2(std::uint32_t bits, __nv_bfloat16) {
  __nv_bfloat162 h;
  __builtin_memcpy(&h, &bits, 4);
  return __bfloat1622float2(h);
}
__device__ __forceinline__ float2 pair_to_float2(std::uint32_t bits, __half) {
  __half2 h;
  __builtin_memcpy(&h, &bits, 4);
  return __half22float2(h);
}
template <typename H>
__device__ __forceinline__ float dot_half_chunk(uint4 raw, const float* xs) {
  const float4 xa = *reinterpret_cast<const float4*>(xs);
  const float4 xb = *reinterpret_cast<const float4*>(xs + 4);
  const float2 w[4] = {pair_to_float2(raw.x, H{}), pair_to_float2(raw.y, H{}), pair_to_float2(raw.z, H{}),
                       pair_to_float2(raw.w, H{})};
  return w[0].x * xa.x + w[0].y * xa.y + w[1].x * xa.z + w[1].y * xa.w + w[2].x * xb.x + w[2].y * xb.y +
         w[3].x * xb.z + w[3].y * xb.w;
}
template <>
__device__ __forceinline__ float dot_chunk<__nv_bfloat16>(uint4 raw, const float* xs, const float*) {
  return dot_half_chunk<__nv_bfloat16>(raw, xs);
}
template <>
__device__ __forceinline__ float dot_chunk<__half>(uint4 raw, const float* xs, const float*) {
  return dot_half_chunk<__half>(raw, xs);
}
template <>
__device__ __forceinline__ float dot_chunk<Mxfp4>(uint4 raw, const float* xs, const float* lut) {
  const std::uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int b = 0; b < 4; ++b) {  // byte b of word i: values 8 i + 2 b (low nibble) and + 1
      const float2 x = *reinterpret_cast<const float2*>(xs + 8 * i + 2 * b);
      const std::uint32_t byte = words[i] >> (8 * b);
      acc += lut[byte & 0x0f] * x.x + lut[(byte >> 4) & 0x0f] * x.y;
    }
  }
  return acc;
}

// The E2M1 table in shared memory: 16 words in 16 banks, so any lookup pattern is conflict-free.
__device__ __forceinline__ void fill_lut(float* lut) {
  if (threadIdx.x < 16) lut[threadIdx.x] = mxfp4_e2m1(static_cast<int>(threadIdx.x));
}

// The gate/up launches' end (both decode forms): the warp's gate and up sums of kOutputs
// outputs reduced, then lane 0 adds the biases and writes act(gate, up) to act[o] for each
// output whose rows are valid. rows/valid: gate at 2 o, up at 2 o + 1.
template <int kOutputs>
__device__ __forceinline__ void store_gate_up(float (&acc)[2 * kOutputs], const std::int64_t (&rows)[2 * kOutputs],
                                              const bool (&valid)[2 * kOutputs], const void* bias, DType bias_dtype,
                                              const DeviceMoe& m, float* act) {
#pragma unroll
  for (int r = 0; r < 2 * kOutputs; ++r) acc[r] = warp_sum(acc[r]);
  if (threadIdx.x % 32 != 0) return;
#pragma unroll
  for (int o = 0; o < kOutputs; ++o) {
    if (!valid[2 * o]) continue;
    const float g = acc[2 * o] + moe_bias_at(bias, bias_dtype, rows[2 * o]);
    const float u = acc[2 * o + 1] + moe_bias_at(bias, bias_dtype, rows[2 * o + 1]);
    act[o] = moe_activation(g, u, m);
  }
}

}  // namespace akv::cuda
