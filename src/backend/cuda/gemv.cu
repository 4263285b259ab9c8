// Decode matmul: out[n, m] = x[n, k] @ w[m, k]^T for a few rows n (<= kGemvMaxRows), bound by
// reading w once; up to kGemvMaxTargets weights of one width in one launch (q/k/v, gate/up).
// w is streamed with 16-byte non-caching loads; x (f32) is read through L1/L2.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/gemv_targets.cuh"
#include "backend/cuda/kernels.h"

namespace akv::cuda {
namespace {

constexpr int kWarps = 8;     // per block; they split k between them
constexpr int kUnroll = 2;    // 16-byte loads per row in flight per lane

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

// Vectorised path (k % E == 0, rows of w and x 16-byte aligned). A block owns kR rows of one
// target; its warps take interleaved 32 * E-element chunks of k, so even m = 1024 fills the GPU,
// and x is read once per kR rows. Partial sums meet in shared memory.
template <typename W, int kN, int kR>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const float* __restrict__ x, std::int64_t xs,
                                                            std::int32_t k, std::int32_t n, GemvTargets<W> set) {
  pdl_trigger();
  constexpr int E = Unpack<W>::kN;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const GemvTarget<W> tg = set.target_of(static_cast<std::int32_t>(blockIdx.x));
  const W* w = tg.w;
  float* y = tg.y;
  const std::int64_t ys = tg.ys;
  const std::int32_t m = tg.m;
  const std::int32_t row0 = (static_cast<std::int32_t>(blockIdx.x) - tg.first_block) * kR;
  const W* wr[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) wr[r] = w + std::int64_t{min(row0 + r, m - 1)} * k;

  const std::int32_t n_chunks = (k + 32 * E - 1) / (32 * E);
  uint4 wv[kUnroll][kR];
  auto load_w = [&](std::int32_t c0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int32_t idx = (c0 + u * kWarps) * 32 * E + lane * E;
#pragma unroll
      for (int r = 0; r < kR; ++r)
        if (idx < k) wv[u][r] = load_stream(wr[r] + idx);
    }
  };
  // Weights never depend on earlier kernels: the first loads are issued before waiting for x,
  // so they overlap the kernel before this one (norm, attention, glu).
  load_w(warp);
  pdl_wait();
  float acc[kR][kN] = {};
  for (std::int32_t c0 = warp; c0 < n_chunks; c0 += kWarps * kUnroll) {
    if (c0 != warp) load_w(c0);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::int32_t idx = (c0 + u * kWarps) * 32 * E + lane * E;
      if (idx >= k) break;
      float wf[kR][E];
#pragma unroll
      for (int r = 0; r < kR; ++r) Unpack<W>::run(wv[u][r], wf[r]);
#pragma unroll
      for (int t = 0; t < kN; ++t) {
        if (t >= n) break;
        const float4* xp = reinterpret_cast<const float4*>(x + t * xs + idx);
#pragma unroll
        for (int q = 0; q < E / 4; ++q) {
          const float4 xv = __ldg(xp + q);
#pragma unroll
          for (int r = 0; r < kR; ++r)
            acc[r][t] += wf[r][4 * q] * xv.x + wf[r][4 * q + 1] * xv.y + wf[r][4 * q + 2] * xv.z +
                         wf[r][4 * q + 3] * xv.w;
        }
      }
    }
  }
  __shared__ float partial[kWarps][kR * kN];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
#pragma unroll
    for (int t = 0; t < kN; ++t) {
      const float v = warp_sum(acc[r][t]);
      if (lane == 0) partial[warp][r * kN + t] = v;
    }
  }
  __syncthreads();
  if (threadIdx.x < kR * kN) {
    const int r = static_cast<int>(threadIdx.x) / kN, t = static_cast<int>(threadIdx.x) % kN;
    float v = 0.0f;
#pragma unroll
    for (int i = 0; i < kWarps; ++i) v += partial[i][threadIdx.x];
    if (t < n && row0 + r < m) y[t * ys + row0 + r] = v;
  }
}

// Any alignment: one warp per row of w, scalar loads.
template <typename W>
__global__ void gemv_scalar_kernel(const float* x, std::int64_t xs, const W* w, std::int32_t k, std::int32_t m,
                                   std::int32_t n, float* y, std::int64_t ys) {
  pdl_trigger();
  pdl_wait();
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

// Rows per block: more rows per block read x fewer times, fewer keep the accumulators in registers.
template <int kN>
constexpr int rows_per_block() {
  return kN <= 2 ? 8 : 4;
}

template <typename W, int kN>
void launch_vec(TensorRef x, std::span<const GemvOutput> outs, Stream s) {
  constexpr int kR = rows_per_block<kN>();
  const GemvTargets<W> set = make_gemv_targets<W>(outs, kR);
  launch(gemv_kernel<W, kN, kR>, static_cast<unsigned>(set.first_block[set.count]), kWarps * 32, 0, s,
      static_cast<const float*>(x.data), x.stride, static_cast<std::int32_t>(x.cols),
      static_cast<std::int32_t>(x.rows), set);
}

}  // namespace

void launch_gemv(TensorRef x, std::span<const GemvOutput> outs, Stream s) {
  AKV_CHECK(!outs.empty() && outs.size() <= kGemvMaxTargets, "gemv: 1 to kGemvMaxTargets outputs");
  AKV_CHECK(x.rows <= kGemvMaxRows, "gemv: too many rows");
  const DType dtype = outs[0].w->dtype;
  const std::size_t elem = dtype_size(dtype);
  bool aligned = reinterpret_cast<std::uintptr_t>(x.data) % 16 == 0 && (x.stride * 4) % 16 == 0;
  for (const GemvOutput& o : outs) {
    const WeightRef& w = *o.w;
    AKV_CHECK(x.cols == w.cols && o.out.rows == x.rows && o.out.cols == w.rows, "gemv shape");
    AKV_CHECK(w.dtype == dtype, "gemv: one weight dtype per launch");
    AKV_CHECK(w.rows < (1ll << 31) && w.cols < (1ll << 31), "gemv: weight too large");
    aligned = aligned && reinterpret_cast<std::uintptr_t>(w.data) % 16 == 0 &&
              (w.cols * static_cast<std::int64_t>(elem)) % 16 == 0;
  }
  if (x.rows == 0) return;
  dispatch_float(dtype, [&](auto tag) {
    using W = decltype(tag);
    if (!aligned) {
      for (const GemvOutput& o : outs)
        launch(gemv_scalar_kernel<W>, blocks_for(o.w->rows, kWarps), kWarps * 32, 0, s,
            static_cast<const float*>(x.data), x.stride, static_cast<const W*>(o.w->data),
            static_cast<std::int32_t>(o.w->cols), static_cast<std::int32_t>(o.w->rows),
            static_cast<std::int32_t>(x.rows), static_cast<float*>(o.out.data), o.out.stride);
    } else if (x.rows == 1) {
      launch_vec<W, 1>(x, outs, s);
    } else if (x.rows == 2) {
      launch_vec<W, 2>(x, outs, s);
    } else if (x.rows <= 4) {
      launch_vec<W, 4>(x, outs, s);
    } else {
      launch_vec<W, 8>(x, outs, s);
    }
  });
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
