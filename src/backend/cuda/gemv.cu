// Decode matmul: out[n, m] = x[n, k] @ w[m, k]^T for a few rows n (<= kGemvMaxRows), bound by
// reading w once. Each warp owns kRowsPerWarp rows of w and streams them with 16-byte
// non-caching loads, kUnroll loads per row in flight; x (f32) is read through L1/L2.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"

namespace akv::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 2;
constexpr int kUnroll = 4;

__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The 16 bytes of w as floats: 8 for bf16/f16, 4 for f32.
template <typename W>
struct Unpack;
template <>
struct Unpack<__nv_bfloat16> {
  static constexpr int kN = 8;
  __device__ static void run(uint4 v, float* f) {
    const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(u[i] << 16);
      f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
  }
};
template <>
struct Unpack<__half> {
  static constexpr int kN = 8;
  __device__ static void run(uint4 v, float* f) {
    const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 p = __half22float2(*reinterpret_cast<const __half2*>(&u[i]));
      f[2 * i] = p.x;
      f[2 * i + 1] = p.y;
    }
  }
};
template <>
struct Unpack<float> {
  static constexpr int kN = 4;
  __device__ static void run(uint4 v, float* f) {
    f[0] = __uint_as_float(v.x);
    f[1] = __uint_as_float(v.y);
    f[2] = __uint_as_float(v.z);
    f[3] = __uint_as_float(v.w);
  }
};

// Vectorised path: k % E == 0, rows of w and x 16-byte aligned.
template <typename W, int kN>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const float* __restrict__ x, std::int64_t xs,
                                                            const W* __restrict__ w, std::int32_t k,
                                                            std::int32_t m, std::int32_t n,
                                                            float* __restrict__ y, std::int64_t ys) {
  constexpr int E = Unpack<W>::kN;
  const int lane = threadIdx.x % 32;
  const std::int32_t row0 = (blockIdx.x * kWarps + threadIdx.x / 32) * kRowsPerWarp;
  if (row0 >= m) return;
  const W* wr[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) wr[r] = w + std::int64_t{min(row0 + r, m - 1)} * k;

  float acc[kRowsPerWarp][kN] = {};
  for (std::int32_t base = lane * E; base < k; base += 32 * E * kUnroll) {
    uint4 wv[kUnroll][kRowsPerWarp];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int32_t idx = base + u * 32 * E;
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r)
        if (idx < k) wv[u][r] = load_stream(wr[r] + idx);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int32_t idx = base + u * 32 * E;
      if (idx >= k) break;
      float wf[kRowsPerWarp][E];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) Unpack<W>::run(wv[u][r], wf[r]);
#pragma unroll
      for (int t = 0; t < kN; ++t) {
        if (t >= n) break;
        const float4* xp = reinterpret_cast<const float4*>(x + t * xs + idx);
#pragma unroll
        for (int q = 0; q < E / 4; ++q) {
          const float4 xv = xp[q];
#pragma unroll
          for (int r = 0; r < kRowsPerWarp; ++r) {
            acc[r][t] += wf[r][4 * q] * xv.x + wf[r][4 * q + 1] * xv.y + wf[r][4 * q + 2] * xv.z +
                         wf[r][4 * q + 3] * xv.w;
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int t = 0; t < kN; ++t) {
      const float v = warp_sum(acc[r][t]);
      if (lane == 0 && t < n && row0 + r < m) y[t * ys + row0 + r] = v;
    }
  }
}

// Any alignment: one warp per row of w, scalar loads.
template <typename W>
__global__ void gemv_scalar_kernel(const float* x, std::int64_t xs, const W* w, std::int32_t k, std::int32_t m,
                                   std::int32_t n, float* y, std::int64_t ys) {
  const std::int32_t row = blockIdx.x * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= m) return;
  const W* wr = w + std::int64_t{row} * k;
  for (std::int32_t t = 0; t < n; ++t) {
    float acc = 0.0f;
    for (std::int32_t c = lane; c < k; c += 32) acc += to_f32(wr[c]) * x[t * xs + c];
    acc = warp_sum(acc);
    if (lane == 0) y[t * ys + row] = acc;
  }
}

template <typename W, int kN>
void launch_vec(TensorRef x, const WeightRef& w, TensorRef out, Stream s) {
  const unsigned blocks = blocks_for(w.rows, kWarps * kRowsPerWarp);
  gemv_kernel<W, kN><<<blocks, kWarps * 32, 0, s>>>(
      static_cast<const float*>(x.data), x.stride, static_cast<const W*>(w.data),
      static_cast<std::int32_t>(w.cols), static_cast<std::int32_t>(w.rows), static_cast<std::int32_t>(x.rows),
      static_cast<float*>(out.data), out.stride);
}

}  // namespace

void launch_gemv(TensorRef x, const WeightRef& w, TensorRef out, Stream s) {
  AKV_CHECK(x.cols == w.cols && out.rows == x.rows && out.cols == w.rows, "gemv shape");
  AKV_CHECK(x.rows <= kGemvMaxRows, "gemv: too many rows");
  AKV_CHECK(w.rows < (1ll << 31) && w.cols < (1ll << 31), "gemv: weight too large");
  if (x.rows == 0) return;
  const std::size_t elem = dtype_size(w.dtype);
  const bool aligned = reinterpret_cast<std::uintptr_t>(w.data) % 16 == 0 &&
                       (w.cols * static_cast<std::int64_t>(elem)) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(x.data) % 16 == 0 && (x.stride * 4) % 16 == 0;
  dispatch_float(w.dtype, [&](auto tag) {
    using W = decltype(tag);
    if (!aligned) {
      gemv_scalar_kernel<W><<<blocks_for(w.rows, kWarps), kWarps * 32, 0, s>>>(
          static_cast<const float*>(x.data), x.stride, static_cast<const W*>(w.data),
          static_cast<std::int32_t>(w.cols), static_cast<std::int32_t>(w.rows),
          static_cast<std::int32_t>(x.rows), static_cast<float*>(out.data), out.stride);
    } else if (x.rows == 1) {
      launch_vec<W, 1>(x, w, out, s);
    } else if (x.rows == 2) {
      launch_vec<W, 2>(x, w, out, s);
    } else if (x.rows <= 4) {
      launch_vec<W, 4>(x, w, out, s);
    } else {
      launch_vec<W, 8>(x, w, out, s);
    }
  });
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
