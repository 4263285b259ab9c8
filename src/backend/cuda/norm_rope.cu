// RMSNorm (whole rows or per-head groups, with the Gemma weight offset; optionally fused with the
// residual add before it) and RoPE (rotate_half pairs, angles and rotation in double as the
// reference does), alone or fused with the KV append (rope_store_kv). Both work in place.
#include <cmath>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"

namespace akv::cuda {
namespace {

constexpr int kNormThreads = 256;

// quantize_group (quant_launch.cuh) for a group of 32 columns held as float4s by 8 consecutive
// lanes (lane % 8 == 0 first): the same amax, d, codes and code sum, so the same bytes. All 32
// lanes of the warp call it; lanes with `in` false hold zeros of a group wholly out of range.
__device__ __forceinline__ void quantize_quad(float4 o, bool in, std::int8_t* code, float2* scale,
                                              int c) {
  float amax = fmaxf(fmaxf(fabsf(o.x), fabsf(o.y)), fmaxf(fabsf(o.z), fabsf(o.w)));
#pragma unroll
  for (int m = 1; m < 8; m <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  const float d = amax / 127.0f;
  auto q = [&](float x) { return amax == 0.0f ? 0 : __float2int_rn(x / d); };
  const int q0 = q(o.x), q1 = q(o.y), q2 = q(o.z), q3 = q(o.w);
  int sum = q0 + q1 + q2 + q3;
#pragma unroll
  for (int m = 1; m < 8; m <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
  if (!in) return;
  *reinterpret_cast<char4*>(code) =
      make_char4(static_cast<signed char>(q0), static_cast<signed char>(q1),
                 static_cast<signed char>(q2), static_cast<signed char>(q3));
  if (c % 32 == 0) *scale = make_float2(d, d * static_cast<float>(sum));
}

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

// kCodes (whole rows, group % 32 == 0): y's int8 GEMV codes too (launch_rms_norm_quantize), each
// 32-column group held by 8 consecutive lanes (a float4 each).
template <typename W, int kItems, bool kCodes = false>
__global__ void rms_norm_reg_kernel(float* x, std::int64_t xs, const float* res, std::int64_t rs,
                                    const W* w, std::int32_t group, std::int32_t groups_per_row,
                                    float eps, float offset, float* y, std::int64_t ys,
                                    std::int8_t* codes, float2* scales) {
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
    const float4 o = make_float4(v[i].x * inv * wv[i][0], v[i].y * inv * wv[i][1],
                                 v[i].z * inv * wv[i][2], v[i].w * inv * wv[i][3]);
    if (c < group) *reinterpret_cast<float4*>(yr + c) = o;
    if constexpr (kCodes)
      quantize_quad(o, c < group, codes + r * group + c, scales + r * (group / 32) + c / 32, c);
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

// One rotate_half pair at angle (s, c) (already scaled): products and difference rounded in
// double one by one (no fused multiply-add), so rope and rope_store_kv give the same floats.
__device__ __forceinline__ void rope_pair(float& a, float& b, double s, double c) {
  const double x1 = a, x2 = b;
  a = static_cast<float>(__dsub_rn(__dmul_rn(x1, c), __dmul_rn(x2, s)));
  b = static_cast<float>(__dadd_rn(__dmul_rn(x2, c), __dmul_rn(x1, s)));
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
    rope_pair(p[i], p[i + half], s, c);
  }
}

constexpr int kRopeStoreThreads = 128;

// rope + store_kv, grid (token, blocks over (head, slot)): each head has head_dim / 2 slots;
// slot j < half rotates pair (j, j + half), the others carry the unrotated dims two at a time.
// q heads rotate in place; kv head g (heads n_q_heads + g) also writes its two k elements, and
// the same two of v, into the token's KV row, as store_kv_kernel does. One angle per thread:
// 64 double sincos per head spread over many blocks cost less than the single-block latency.
template <typename T>
__global__ void rope_store_kv_kernel(float* qk, std::int64_t qks, const float* v, std::int64_t vs,
                                     std::int32_t n_q_heads, std::int32_t n_kv_heads,
                                     std::int32_t head_dim, std::int32_t half,
                                     const double* inv_freq, double scaling,
                                     const std::int32_t* positions, T* kc, T* vc,
                                     std::int32_t block_size, DeviceBatch b) {
  pdl_trigger();
  pdl_wait();
  const std::int32_t t = blockIdx.x;
  const std::int32_t slots = head_dim / 2;
  const std::int32_t idx = blockIdx.y * kRopeStoreThreads + threadIdx.x;
  const std::int32_t h = idx / slots, j = idx % slots;
  if (h >= n_q_heads + n_kv_heads) return;
  float* p = qk + std::int64_t{t} * qks + std::int64_t{h} * head_dim;
  // Element indices this thread owns within the head.
  std::int32_t e0, e1;
  if (j < half) {
    e0 = j, e1 = j + half;
    double s, c;
    sincos(static_cast<double>(positions[t]) * inv_freq[j], &s, &c);
    c *= scaling;
    s *= scaling;
    rope_pair(p[e0], p[e1], s, c);
  } else {
    e0 = 2 * half + 2 * (j - half), e1 = e0 + 1;
  }
  if (h < n_q_heads) return;
  const std::int32_t g = h - n_q_heads;
  const std::int32_t* info = b.seq_info + 4 * b.token_seq[t];
  const std::int32_t pos = info[2] + (t - info[0]);
  const std::int64_t row_width = std::int64_t{n_kv_heads} * head_dim;
  const std::int64_t row =
      std::int64_t{b.tables[info[3] + pos / block_size]} * block_size + pos % block_size;
  const std::int64_t c0 = std::int64_t{g} * head_dim;
  const float* vr = v + std::int64_t{t} * vs + c0;
  T* kd = kc + row * row_width + c0;
  T* vd = vc + row * row_width + c0;
  kd[e0] = from_f32<T>(p[e0]);
  kd[e1] = from_f32<T>(p[e1]);
  vd[e0] = from_f32<T>(vr[e0]);
  vd[e1] = from_f32<T>(vr[e1]);
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
        launch(kernel, blocks, kNormThreads, 0, s, xp, x.stride, res, res_stride, wp, g,
               groups_per_row, eps, offset, yp, out.stride, static_cast<std::int8_t*>(nullptr),
               static_cast<float2*>(nullptr));
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

bool rms_norm_quantize_fits(TensorRef x, const WeightRef& w, TensorRef out, const TensorRef* res) {
  auto aligned = [](const void* p, std::int64_t stride) {
    return reinterpret_cast<std::uintptr_t>(p) % 16 == 0 && stride % 4 == 0;
  };
  // The shapes rms_norm_impl sends to rms_norm_reg_kernel, so the floats are the unfused ones.
  return w.cols == x.cols && x.cols % kQuantGroup == 0 &&
         x.cols <= 4 * kNormThreads * kMaxNormItems && (x.cols > 512 || res != nullptr) &&
         out.cols == x.cols && out.rows == x.rows && aligned(x.data, x.stride) &&
         aligned(out.data, out.stride) && (res == nullptr || aligned(res->data, res->stride));
}

void launch_rms_norm_quantize(TensorRef x, const TensorRef* res, const WeightRef& w, float eps,
                              float offset, TensorRef out, QuantActivations a, Stream s) {
  AKV_CHECK(rms_norm_quantize_fits(x, w, out, res), "rms_norm_quantize: shape");
  AKV_CHECK(res == nullptr || (res->rows == x.rows && res->cols == x.cols), "add_rms_norm shape");
  if (x.rows == 0) return;
  const auto* rp = res != nullptr ? static_cast<const float*>(res->data) : nullptr;
  const std::int64_t rs = res != nullptr ? res->stride : 0;
  const auto g = static_cast<std::int32_t>(x.cols);
  const int items = static_cast<int>((x.cols + 4 * kNormThreads - 1) / (4 * kNormThreads));
  dispatch_float(w.dtype, [&](auto tag) {
    using W = decltype(tag);
    auto run = [&](auto kernel) {
      launch(kernel, static_cast<unsigned>(x.rows), kNormThreads, 0, s, static_cast<float*>(x.data),
             x.stride, rp, rs, static_cast<const W*>(w.data), g, 1, eps, offset,
             static_cast<float*>(out.data), out.stride, a.codes,
             reinterpret_cast<float2*>(a.scales));
    };
    switch (items) {
      case 1:
        run(rms_norm_reg_kernel<W, 1, true>);
        break;
      case 2:
        run(rms_norm_reg_kernel<W, 2, true>);
        break;
      case 3:
        run(rms_norm_reg_kernel<W, 3, true>);
        break;
      default:
        run(rms_norm_reg_kernel<W, 4, true>);
        break;
    }
  });
  AKV_CUDA_CHECK_LAUNCH();
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

void launch_rope_store_kv(TensorRef qk, TensorRef v, std::int64_t head_dim, const double* inv_freq,
                          std::int64_t rotary_dim, double attention_scaling,
                          const std::int32_t* positions, void* k_cache, void* v_cache,
                          DType kv_dtype, std::int64_t row_width, std::int32_t block_size,
                          const DeviceBatch& b, Stream s) {
  AKV_CHECK(head_dim % 2 == 0 && rotary_dim % 2 == 0 && rotary_dim <= head_dim,
            "rope_store_kv: even dims");
  AKV_CHECK(qk.cols % head_dim == 0 && row_width % head_dim == 0 && qk.cols > row_width,
            "rope_store_kv shape");
  AKV_CHECK(v.rows == qk.rows && v.cols == row_width && b.n_tokens == qk.rows,
            "rope_store_kv: v and batch rows");
  if (qk.rows == 0) return;
  const auto n_kv_heads = static_cast<std::int32_t>(row_width / head_dim);
  const auto n_q_heads = static_cast<std::int32_t>(qk.cols / head_dim) - n_kv_heads;
  const std::int64_t threads = std::int64_t{n_q_heads + n_kv_heads} * (head_dim / 2);
  AKV_CHECK(qk.rows < (1ll << 31), "rope_store_kv: too many rows");
  const dim3 grid(static_cast<unsigned>(qk.rows), blocks_for(threads, kRopeStoreThreads));
  dispatch_float(kv_dtype, [&](auto tag) {
    using T = decltype(tag);
    launch(rope_store_kv_kernel<T>, grid, kRopeStoreThreads, 0, s, static_cast<float*>(qk.data),
           qk.stride, static_cast<const float*>(v.data), v.stride, n_q_heads, n_kv_heads,
           static_cast<std::int32_t>(head_dim), static_cast<std::int32_t>(rotary_dim / 2), inv_freq,
           attention_scaling, positions, static_cast<T*>(k_cache), static_cast<T*>(v_cache),
           block_size, b);
  });
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
