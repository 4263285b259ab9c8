// The device pieces of the grouped MoE prefill (cuda_moe.cpp runs the GEMMs between them): the
// (token, choice) pairs sorted by expert, the tokens' rows gathered in that order, the
// activation over the grouped gate/up rows, the weighted sum back per token, and MXFP4 expert
// rows dequantized to bf16 for the tensor-core GEMMs.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/moe_device.cuh"
#include "backend/cuda/moe_kernels.h"

namespace akv::cuda {
namespace {

constexpr int kGroupThreads = 1024;

// One block: histogram of the pairs' experts, prefix sum, then each pair takes a slot.
__global__ void __launch_bounds__(kGroupThreads)
    moe_group_kernel(const float* route, std::int64_t route_stride, int n_pairs, int top_k, int n_experts,
                     std::int32_t* offsets, std::int32_t* sorted, std::int32_t* position) {
  __shared__ int count[kMoeMaxExperts + 1];
  pdl_trigger();
  pdl_wait();
  for (int e = threadIdx.x; e <= n_experts; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int a = threadIdx.x; a < n_pairs; a += blockDim.x)
    atomicAdd(&count[static_cast<int>(route[(a / top_k) * route_stride + a % top_k])], 1);
  __syncthreads();
  if (threadIdx.x == 0) {  // count[e] becomes the first slot of expert e
    int sum = 0;
    for (int e = 0; e < n_experts; ++e) {
      const int c = count[e];
      offsets[e] = sum;
      count[e] = sum;
      sum += c;
    }
    offsets[n_experts] = sum;
  }
  __syncthreads();
  for (int a = threadIdx.x; a < n_pairs; a += blockDim.x) {
    const int e = static_cast<int>(route[(a / top_k) * route_stride + a % top_k]);
    const int slot = atomicAdd(&count[e], 1);
    sorted[slot] = a;
    position[a] = slot;
  }
}

// One block per sorted row.
template <typename T>
__global__ void moe_gather_kernel(const float* x, std::int64_t x_stride, const std::int32_t* sorted, int top_k,
                                  int cols, T* xg) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t row = blockIdx.x;
  const float* src = x + std::int64_t{sorted[row] / top_k} * x_stride;
  T* dst = xg + row * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = from_f32<T>(src[c]);
}

// One block per sorted row.
template <typename T>
__global__ void moe_grouped_activation_kernel(const T* gate_up, std::int64_t gu_stride, T* act,
                                              std::int64_t act_stride, const float* route,
                                              std::int64_t route_stride, const std::int32_t* sorted,
                                              const void* bias, DType bias_dtype, DeviceMoe m) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t row = blockIdx.x;
  const int a = sorted[row];
  const std::int64_t expert = static_cast<std::int64_t>(route[(a / m.top_k) * route_stride + a % m.top_k]);
  const std::int64_t b = expert * 2 * m.inter;
  const T* h = gate_up + row * gu_stride;
  for (int j = threadIdx.x; j < m.inter; j += blockDim.x) {
    const int gj = m.interleaved ? 2 * j : j, uj = m.interleaved ? 2 * j + 1 : m.inter + j;
    const float g = to_f32(h[gj]) + moe_bias_at(bias, bias_dtype, b + gj);
    const float u = to_f32(h[uj]) + moe_bias_at(bias, bias_dtype, b + uj);
    act[row * act_stride + j] = from_f32<T>(moe_activation(g, u, m));
  }
}

// One block per token.
template <typename T>
__global__ void moe_combine_kernel(const T* down, std::int64_t down_stride, const float* route,
                                   std::int64_t route_stride, const std::int32_t* position, const void* bias,
                                   DType bias_dtype, float* out, std::int64_t out_stride, DeviceMoe m) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t t = blockIdx.x;
  const float* r = route + t * route_stride;
  for (int c = threadIdx.x; c < m.hidden; c += blockDim.x) {
    float y = 0.0f;
    for (int k = 0; k < m.top_k; ++k) {
      const std::int64_t expert = static_cast<std::int64_t>(r[k]);
      const float d = to_f32(down[std::int64_t{position[t * m.top_k + k]} * down_stride + c]) +
                      moe_bias_at(bias, bias_dtype, expert * m.hidden + c);
      y += r[m.top_k + k] * d;
    }
    out[t * out_stride + c] = y;
  }
}

// One block per row, one thread per byte: two bf16 values.
__global__ void mxfp4_rows_to_bf16_kernel(const std::uint8_t* blocks, const std::uint8_t* scales, int cols,
                                          __nv_bfloat162* dst) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t row = blockIdx.x;
  const std::uint8_t* b = blocks + row * (cols / 2);
  const std::uint8_t* sc = scales + row * (cols / 32);
  __nv_bfloat162* d = dst + row * (cols / 2);
  for (int i = threadIdx.x; i < cols / 2; i += blockDim.x) {
    const float s = mxfp4_scale(sc[i / 16]);
    d[i] = __floats2bfloat162_rn(mxfp4_e2m1(b[i] & 0x0f) * s, mxfp4_e2m1(b[i] >> 4) * s);
  }
}

}  // namespace

std::size_t moe_groups_bytes(std::int64_t n_pairs, std::int64_t n_experts) {
  return static_cast<std::size_t>(n_experts + 1 + 2 * n_pairs) * sizeof(std::int32_t);
}

MoeGroups moe_groups_in(void* memory, std::int64_t n_pairs, std::int64_t n_experts) {
  auto* p = static_cast<std::int32_t*>(memory);
  return {p, p + n_experts + 1, p + n_experts + 1 + n_pairs};
}

void launch_moe_group(TensorRef route, const MoeParams& p, std::int64_t n_tokens, const MoeGroups& g, Stream s) {
  AKV_CHECK(p.n_experts <= kMoeMaxExperts, "moe group: at most 1024 experts");
  launch(moe_group_kernel, dim3(1), kGroupThreads, 0, s, static_cast<const float*>(route.data), route.stride,
         static_cast<int>(n_tokens * p.top_k), static_cast<int>(p.top_k), static_cast<int>(p.n_experts),
         g.offsets, g.sorted, g.position);
  AKV_CUDA_CHECK_LAUNCH();
}

void launch_moe_gather(TensorRef x, const MoeGroups& g, std::int64_t n_pairs, int top_k, DType dtype, void* xg,
                       Stream s) {
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    launch(moe_gather_kernel<T>, dim3(static_cast<unsigned>(n_pairs)), 256, 0, s, static_cast<const float*>(x.data),
           x.stride, static_cast<const std::int32_t*>(g.sorted), top_k, static_cast<int>(x.cols), static_cast<T*>(xg));
  });
  AKV_CUDA_CHECK_LAUNCH();
}

void launch_moe_grouped_activation(const void* gate_up, std::int64_t gate_up_stride, void* act,
                                   std::int64_t act_stride, DType dtype, TensorRef route, const MoeGroups& g,
                                   std::int64_t n_pairs, const WeightRef& gate_up_bias, const MoeParams& p,
                                   Stream s) {
  const DeviceMoe m = device_moe(p, 0);
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    launch(moe_grouped_activation_kernel<T>, dim3(static_cast<unsigned>(n_pairs)), 256, 0, s,
           static_cast<const T*>(gate_up), gate_up_stride, static_cast<T*>(act), act_stride,
           static_cast<const float*>(route.data), route.stride, static_cast<const std::int32_t*>(g.sorted),
           gate_up_bias.data, gate_up_bias.dtype, m);
  });
  AKV_CUDA_CHECK_LAUNCH();
}

void launch_moe_combine(const void* down, std::int64_t down_stride, DType dtype, TensorRef route, const MoeGroups& g,
                        const WeightRef& down_bias, const MoeParams& p, TensorRef out, Stream s) {
  const DeviceMoe m = device_moe(p, out.cols);
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    launch(moe_combine_kernel<T>, dim3(static_cast<unsigned>(out.rows)), 256, 0, s, static_cast<const T*>(down),
           down_stride, static_cast<const float*>(route.data), route.stride,
           static_cast<const std::int32_t*>(g.position), down_bias.data, down_bias.dtype,
           static_cast<float*>(out.data), out.stride, m);
  });
  AKV_CUDA_CHECK_LAUNCH();
}

void launch_mxfp4_rows_to_bf16(const WeightRef& blocks, const WeightRef& scales, std::int64_t row0,
                               std::int64_t rows, void* dst, Stream s) {
  const std::int64_t cols = blocks.cols;
  AKV_CHECK(cols % 32 == 0 && row0 >= 0 && row0 + rows <= blocks.rows, "mxfp4 rows: whole blocks in range");
  if (rows == 0) return;
  launch(mxfp4_rows_to_bf16_kernel, dim3(static_cast<unsigned>(rows)), 256, 0, s,
         static_cast<const std::uint8_t*>(blocks.data) + row0 * (cols / 2),
         static_cast<const std::uint8_t*>(scales.data) + row0 * (cols / 32), static_cast<int>(cols),
         static_cast<__nv_bfloat162*>(dst));
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
