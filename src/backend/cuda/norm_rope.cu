// RMSNorm (whole rows or per-head groups, with the Gemma weight offset) and RoPE (rotate_half
// pairs, angles and rotation in double as the reference does). Both work in place.
#include <cmath>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"

namespace akv::cuda {
namespace {

constexpr int kNormThreads = 256;

// One block per (row, group) for wide groups: each thread keeps its own elements' partial sum.
template <typename W>
__global__ void rms_norm_block_kernel(const float* x, std::int64_t xs, const W* w, std::int32_t group,
                                      std::int32_t groups_per_row, float eps, float offset, float* y,
                                      std::int64_t ys) {
  const std::int64_t r = blockIdx.x / groups_per_row;
  const std::int64_t g0 = std::int64_t{blockIdx.x % groups_per_row} * group;
  const float* xr = x + r * xs + g0;
  float* yr = y + r * ys + g0;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < group; c += kNormThreads) ss += xr[c] * xr[c];
  __shared__ float partial[kNormThreads / 32];
  ss = warp_sum(ss);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
  __syncthreads();
  ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kNormThreads / 32; ++i) ss += partial[i];
  const float inv = rsqrtf(ss / static_cast<float>(group) + eps);
  for (int c = threadIdx.x; c < group; c += kNormThreads) yr[c] = xr[c] * inv * (to_f32(w[c]) + offset);
}

// One warp per (row, group) for per-head norms (group <= 512).
template <typename W>
__global__ void rms_norm_warp_kernel(const float* x, std::int64_t xs, const W* w, std::int32_t group,
                                     std::int32_t groups_per_row, std::int64_t n_groups, float eps,
                                     float offset, float* y, std::int64_t ys) {
  const std::int64_t gi = std::int64_t{blockIdx.x} * (kNormThreads / 32) + threadIdx.x / 32;
  if (gi >= n_groups) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t r = gi / groups_per_row, g0 = (gi % groups_per_row) * group;
  const float* xr = x + r * xs + g0;
  float* yr = y + r * ys + g0;
  float ss = 0.0f;
  for (int c = lane; c < group; c += 32) ss += xr[c] * xr[c];
  ss = warp_sum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(group) + eps);
  for (int c = lane; c < group; c += 32) yr[c] = xr[c] * inv * (to_f32(w[c]) + offset);
}

// Block per row; thread i handles pair (i, i + half) of every head.
__global__ void rope_kernel(float* x, std::int64_t xs, std::int32_t n_heads, std::int32_t head_dim,
                            std::int32_t half, const double* inv_freq, double scaling,
                            const std::int32_t* positions) {
  float* xr = x + std::int64_t{blockIdx.x} * xs;
  const double pos = positions[blockIdx.x];
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    double s, c;
    sincos(pos * inv_freq[i], &s, &c);
    c *= scaling;
    s *= scaling;
    for (int h = 0; h < n_heads; ++h) {
      float* p = xr + std::int64_t{h} * head_dim;
      const double x1 = p[i], x2 = p[i + half];
      p[i] = static_cast<float>(x1 * c - x2 * s);
      p[i + half] = static_cast<float>(x2 * c + x1 * s);
    }
  }
}

}  // namespace

void launch_rms_norm(TensorRef x, const WeightRef& w, float eps, float offset, TensorRef out, Stream s) {
  const std::int64_t group = w.cols;
  AKV_CHECK(x.cols % group == 0 && out.cols == x.cols && out.rows == x.rows, "rms_norm shape");
  if (x.rows == 0) return;
  const auto groups_per_row = static_cast<std::int32_t>(x.cols / group);
  const std::int64_t n_groups = x.rows * groups_per_row;
  const auto* xp = static_cast<const float*>(x.data);
  auto* yp = static_cast<float*>(out.data);
  dispatch_float(w.dtype, [&](auto tag) {
    using W = decltype(tag);
    const W* wp = static_cast<const W*>(w.data);
    if (group > 512) {
      rms_norm_block_kernel<W><<<static_cast<unsigned>(n_groups), kNormThreads, 0, s>>>(
          xp, x.stride, wp, static_cast<std::int32_t>(group), groups_per_row, eps, offset, yp, out.stride);
    } else {
      rms_norm_warp_kernel<W><<<blocks_for(n_groups, kNormThreads / 32), kNormThreads, 0, s>>>(
          xp, x.stride, wp, static_cast<std::int32_t>(group), groups_per_row, n_groups, eps, offset, yp,
          out.stride);
    }
  });
  AKV_CUDA_CHECK_LAUNCH();
}

void launch_rope(TensorRef x, std::int64_t head_dim, const double* inv_freq, std::int64_t rotary_dim,
                 double attention_scaling, const std::int32_t* positions, Stream s) {
  AKV_CHECK(x.cols % head_dim == 0 && rotary_dim <= head_dim, "rope shape");
  if (x.rows == 0 || rotary_dim == 0) return;
  const auto half = static_cast<std::int32_t>(rotary_dim / 2);
  const int threads = half >= 128 ? 128 : ((half + 31) / 32) * 32;
  rope_kernel<<<static_cast<unsigned>(x.rows), threads, 0, s>>>(
      static_cast<float*>(x.data), x.stride, static_cast<std::int32_t>(x.cols / head_dim),
      static_cast<std::int32_t>(head_dim), half, inv_freq, attention_scaling, positions);
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
