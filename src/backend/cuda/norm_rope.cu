// RMSNorm (whole rows or per-head groups, with the Gemma weight offset; optionally fused with the
// residual add before it) and RoPE (rotate_half pairs, angles and rotation in double as the
// reference does). Both work in place.
#include <cmath>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"

namespace akv::cuda {
namespace {

constexpr int kNormThreads = 256;

// One block per (row, group) for wide groups: each thread keeps its own elements' partial sum.
// With `res`, x += res first (x is then written back: the residual add fused with the norm).
// kVec: 16-byte accesses (group, strides and pointers multiples of 4 floats).
template <typename W, bool kVec>
__global__ void rms_norm_block_kernel(float* x, std::int64_t xs, const float* res, std::int64_t rs, const W* w,
                                      std::int32_t group, std::int32_t groups_per_row, float eps, float offset,
                                      float* y, std::int64_t ys) {
  pdl_trigger();
  pdl_wait();
  constexpr int V = kVec ? 4 : 1;
  const std::int64_t r = blockIdx.x / groups_per_row;
  const std::int64_t g0 = std::int64_t{blockIdx.x % groups_per_row} * group;
  float* xr = x + r * xs + g0;
  float* yr = y + r * ys + g0;
  const float* rr = res != nullptr ? res + r * rs + g0 : nullptr;
  float ss = 0.0f;
  for (int c = threadIdx.x * V; c < group; c += kNormThreads * V) {
    float v[V];
    if constexpr (kVec) {
      const float4 a = *reinterpret_cast<const float4*>(xr + c);
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    } else {
      v[0] = xr[c];
    }
    if (rr != nullptr) {
      if constexpr (kVec) {
        const float4 b = *reinterpret_cast<const float4*>(rr + c);
        v[0] += b.x, v[1] += b.y, v[2] += b.z, v[3] += b.w;
        *reinterpret_cast<float4*>(xr + c) = make_float4(v[0], v[1], v[2], v[3]);
      } else {
        v[0] += rr[c];
        xr[c] = v[0];
      }
    }
#pragma unroll
    for (int i = 0; i < V; ++i) ss += v[i] * v[i];
  }
  __shared__ float partial[kNormThreads / 32];
  ss = warp_sum(ss);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
  __syncthreads();
  ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kNormThreads / 32; ++i) ss += partial[i];
  const float inv = rsqrtf(ss / static_cast<float>(group) + eps);
  // Each thread reads back only the elements it wrote above.
  for (int c = threadIdx.x * V; c < group; c += kNormThreads * V) {
#pragma unroll
    for (int i = 0; i < V; ++i) yr[c + i] = xr[c + i] * inv * (to_f32(w[c + i]) + offset);
  }
}

// Vector path for groups of at most kNormThreads * 4 * kMaxNormItems floats: each thread keeps its
// kItems float4s of x in registers (read once, written once) and loads its weights before
// waiting for the previous kernel.
constexpr int kMaxNormItems = 4;

template <typename W, int kItems>
__global__ void rms_norm_reg_kernel(float* x, std::int64_t xs, const float* res, std::int64_t rs, const W* w,
                                    std::int32_t group, std::int32_t groups_per_row, float eps, float offset,
                                    float* y, std::int64_t ys) {
  pdl_trigger();
  const std::int64_t r = blockIdx.x / groups_per_row;
  const std::int64_t g0 = std::int64_t{blockIdx.x % groups_per_row} * group;
  float wv[kItems][4];
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int c = (threadIdx.x + i * kNormThreads) * 4;
#pragma unroll
    for (int e = 0; e < 4; ++e) wv[i][e] = c < group ? to_f32(w[c + e]) + offset : 0.0f;
  }
  pdl_wait();
  float* xr = x + r * xs + g0;
  float* yr = y + r * ys + g0;
  const float* rr = res != nullptr ? res + r * rs + g0 : nullptr;
  float4 v[kItems];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int c = (threadIdx.x + i * kNormThreads) * 4;
    v[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (c < group) v[i] = *reinterpret_cast<const float4*>(xr + c);
  }
  if (rr != nullptr) {
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const int c = (threadIdx.x + i * kNormThreads) * 4;
      if (c >= group) continue;
      const float4 b = *reinterpret_cast<const float4*>(rr + c);
      v[i].x += b.x, v[i].y += b.y, v[i].z += b.z, v[i].w += b.w;
      *reinterpret_cast<float4*>(xr + c) = v[i];
    }
  }
#pragma unroll
  for (int i = 0; i < kItems; ++i) ss += v[i].x * v[i].x + v[i].y * v[i].y + v[i].z * v[i].z + v[i].w * v[i].w;
  __shared__ float partial[kNormThreads / 32];
  ss = warp_sum(ss);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
  __syncthreads();
  ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kNormThreads / 32; ++i) ss += partial[i];
  const float inv = rsqrtf(ss / static_cast<float>(group) + eps);
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int c = (threadIdx.x + i * kNormThreads) * 4;
    if (c < group)
      *reinterpret_cast<float4*>(yr + c) = make_float4(v[i].x * inv * wv[i][0], v[i].y * inv * wv[i][1],
                                                       v[i].z * inv * wv[i][2], v[i].w * inv * wv[i][3]);
  }
}

// One warp per (row, group) for per-head norms (group <= 512).
template <typename W>
__global__ void rms_norm_warp_kernel(const float* x, std::int64_t xs, const W* w, std::int32_t group,
                                     std::int32_t groups_per_row, std::int64_t n_groups, float eps,
                                     float offset, float* y, std::int64_t ys) {
  pdl_trigger();
  pdl_wait();
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

constexpr int kRopeHeadsPerThread = 8;
constexpr int kRopeThreads = 128;

// Grid (row, thread blocks over the pairs): a thread owns pair (i, i + half) of up to
// kRopeHeadsPerThread heads, so one angle computation serves several heads.
__global__ void rope_kernel(float* x, std::int64_t xs, std::int32_t n_heads, std::int32_t head_dim,
                            std::int32_t half, const double* inv_freq, double scaling,
                            const std::int32_t* positions) {
  pdl_trigger();
  pdl_wait();
  const std::int32_t idx = blockIdx.y * kRopeThreads + threadIdx.x;
  const std::int32_t i = idx % half, h0 = (idx / half) * kRopeHeadsPerThread;
  if (h0 >= n_heads) return;
  float* xr = x + std::int64_t{blockIdx.x} * xs;
  double s, c;
  sincos(static_cast<double>(positions[blockIdx.x]) * inv_freq[i], &s, &c);
  c *= scaling;
  s *= scaling;
  const std::int32_t h1 = min(h0 + kRopeHeadsPerThread, n_heads);
  for (std::int32_t h = h0; h < h1; ++h) {
    float* p = xr + std::int64_t{h} * head_dim;
    const double x1 = p[i], x2 = p[i + half];
    p[i] = static_cast<float>(x1 * c - x2 * s);
    p[i + half] = static_cast<float>(x2 * c + x1 * s);
  }
}

}  // namespace

namespace {

// out = rms_norm(x (+= res)); res may be null.
void rms_norm_impl(TensorRef x, const float* res, std::int64_t res_stride, const WeightRef& w, float eps,
                   float offset, TensorRef out, Stream s) {
  const std::int64_t group = w.cols;
  AKV_CHECK(x.cols % group == 0 && out.cols == x.cols && out.rows == x.rows, "rms_norm shape");
  if (x.rows == 0) return;
  const auto groups_per_row = static_cast<std::int32_t>(x.cols / group);
  const std::int64_t n_groups = x.rows * groups_per_row;
  auto* xp = static_cast<float*>(x.data);
  auto* yp = static_cast<float*>(out.data);
  const bool vec = group % 4 == 0 && x.stride % 4 == 0 && out.stride % 4 == 0 &&
                   reinterpret_cast<std::uintptr_t>(xp) % 16 == 0 && reinterpret_cast<std::uintptr_t>(yp) % 16 == 0 &&
                   (res == nullptr || (res_stride % 4 == 0 && reinterpret_cast<std::uintptr_t>(res) % 16 == 0));
  dispatch_float(w.dtype, [&](auto tag) {
    using W = decltype(tag);
    const W* wp = static_cast<const W*>(w.data);
    const auto g = static_cast<std::int32_t>(group);
    const auto blocks = static_cast<unsigned>(n_groups);
    const int items = static_cast<int>((group + 4 * kNormThreads - 1) / (4 * kNormThreads));
    if (vec && items <= kMaxNormItems && (group > 512 || res != nullptr)) {
      auto run = [&](auto kernel) {
        launch(kernel, blocks, kNormThreads, 0, s, xp, x.stride, res, res_stride, wp, g, groups_per_row, eps,
               offset, yp, out.stride);
      };
      switch (items) {
        case 1: run(rms_norm_reg_kernel<W, 1>); break;
        case 2: run(rms_norm_reg_kernel<W, 2>); break;
        case 3: run(rms_norm_reg_kernel<W, 3>); break;
        default: run(rms_norm_reg_kernel<W, 4>); break;
      }
    } else if (group > 512 || res != nullptr) {
      if (vec)
        launch(rms_norm_block_kernel<W, true>, blocks, kNormThreads, 0, s, xp, x.stride, res, res_stride, wp, g,
                                                                       groups_per_row, eps, offset, yp, out.stride);
      else
        launch(rms_norm_block_kernel<W, false>, blocks, kNormThreads, 0, s, xp, x.stride, res, res_stride, wp, g,
                                                                        groups_per_row, eps, offset, yp, out.stride);
    } else {
      launch(rms_norm_warp_kernel<W>, blocks_for(n_groups, kNormThreads / 32), kNormThreads, 0, s,
          xp, x.stride, wp, g, groups_per_row, n_groups, eps, offset, yp, out.stride);
    }
  });
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_rms_norm(TensorRef x, const WeightRef& w, float eps, float offset, TensorRef out, Stream s) {
  rms_norm_impl(x, nullptr, 0, w, eps, offset, out, s);
}

void launch_add_rms_norm(TensorRef acc, TensorRef res, const WeightRef& w, float eps, float offset, TensorRef out,
                         Stream s) {
  AKV_CHECK(res.rows == acc.rows && res.cols == acc.cols, "add_rms_norm shape");
  rms_norm_impl(acc, static_cast<const float*>(res.data), res.stride, w, eps, offset, out, s);
}

void launch_rope(TensorRef x, std::int64_t head_dim, const double* inv_freq, std::int64_t rotary_dim,
                 double attention_scaling, const std::int32_t* positions, Stream s) {
  AKV_CHECK(x.cols % head_dim == 0 && rotary_dim <= head_dim, "rope shape");
  if (x.rows == 0 || rotary_dim == 0) return;
  const auto half = static_cast<std::int32_t>(rotary_dim / 2);
  const auto n_heads = static_cast<std::int32_t>(x.cols / head_dim);
  const std::int64_t threads = std::int64_t{half} * ((n_heads + kRopeHeadsPerThread - 1) / kRopeHeadsPerThread);
  AKV_CHECK(x.rows < (1ll << 31), "rope: too many rows");
  const dim3 grid(static_cast<unsigned>(x.rows), blocks_for(threads, kRopeThreads));
  launch(rope_kernel, grid, kRopeThreads, 0, s, static_cast<float*>(x.data), x.stride, n_heads,
                                            static_cast<std::int32_t>(head_dim), half, inv_freq,
                                            attention_scaling, positions);
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
