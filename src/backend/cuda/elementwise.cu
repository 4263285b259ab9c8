// Elementwise and data-movement kernels: embedding lookup, residual add, bias, GLU (f32, f32 with
// the down GEMV's int8 codes, and half for the fused MLP), softcap, row gather, f32 -> half
// conversion (cuBLAS inputs), the KV append and KV block copies.
#include <algorithm>
#include <cmath>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/quant_launch.cuh"

namespace akv::cuda {
namespace {

constexpr int kThreads = 256;

// Grids below are (column blocks, rows): rows may exceed 65535, columns never do.
dim3 grid_2d(std::int64_t rows, std::int64_t cols) {
  AKV_CHECK(rows < (1ll << 31) && cols < 65535ll * kThreads, "tensor too large for a 2-D grid");
  return dim3(static_cast<unsigned>(rows), blocks_for(cols, kThreads));
}

template <typename T>
__global__ void embed_kernel(const T* table, std::int64_t cols, const std::int32_t* ids, float scale,
                             float* out, std::int64_t out_stride) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t r = blockIdx.x, c = blockIdx.y * kThreads + threadIdx.x;
  if (c < cols) out[r * out_stride + c] = to_f32(table[ids[r] * cols + c]) * scale;
}

__global__ void add_kernel(float* acc, std::int64_t acc_stride, const float* x, std::int64_t x_stride,
                           std::int64_t cols) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t r = blockIdx.x, c = blockIdx.y * kThreads + threadIdx.x;
  if (c < cols) acc[r * acc_stride + c] += x[r * x_stride + c];
}

template <typename T>
__global__ void add_bias_kernel(float* out, std::int64_t stride, const T* bias, std::int64_t cols) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t r = blockIdx.x, c = blockIdx.y * kThreads + threadIdx.x;
  if (c < cols) out[r * stride + c] += to_f32(bias[c]);
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

// T: float, or a half type (computed in f32).
template <typename T, bool kGelu>
__global__ void glu_kernel(const T* gate, std::int64_t gs, const T* up, std::int64_t us, T* out, std::int64_t os,
                           std::int64_t cols) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t r = blockIdx.x, c = blockIdx.y * kThreads + threadIdx.x;
  if (c >= cols) return;
  const float g = to_f32(gate[r * gs + c]);
  out[r * os + c] = from_f32<T>((kGelu ? gelu_tanh(g) : silu(g)) * to_f32(up[r * us + c]));
}

// Four columns per thread (cols and strides multiples of 4, 16-byte aligned rows).
template <bool kGelu>
__global__ void glu_vec_kernel(const float* gate, std::int64_t gs, const float* up, std::int64_t us, float* out,
                               std::int64_t os, std::int64_t cols) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t r = blockIdx.x, c = (blockIdx.y * kThreads + threadIdx.x) * 4;
  if (c >= cols) return;
  const float4 g = *reinterpret_cast<const float4*>(gate + r * gs + c);
  const float4 u = *reinterpret_cast<const float4*>(up + r * us + c);
  auto act = [](float x) { return kGelu ? gelu_tanh(x) : silu(x); };
  *reinterpret_cast<float4*>(out + r * os + c) = make_float4(act(g.x) * u.x, act(g.y) * u.y, act(g.z) * u.z, act(g.w) * u.w);
}

// glu_kernel (f32) with out's GEMV codes: one warp per 32-column group of a row, a column a lane.
template <bool kGelu>
__global__ void glu_quantize_kernel(const float* gate, std::int64_t gs, const float* up,
                                    std::int64_t us, float* out, std::int64_t os, std::int32_t n,
                                    std::int32_t cols, std::int8_t* codes, float2* scales) {
  pdl_trigger();
  pdl_wait();
  WarpGroup w;
  if (!warp_group(n, cols, w)) return;
  const std::int64_t r = w.row, c = w.col;
  const float x = gate[r * gs + c];
  const float a = (kGelu ? gelu_tanh(x) : silu(x)) * up[r * us + c];
  out[r * os + c] = a;
  quantize_group(a, w.lane, &codes[r * cols + c], &scales[w.group]);
}

// Eight half columns per thread, 16-byte loads and stores (cols and strides multiples of 8,
// 16-byte aligned rows).
template <typename T, bool kGelu>
__global__ void glu_half_vec_kernel(const T* gate, std::int64_t gs, const T* up, std::int64_t us, T* out,
                                    std::int64_t os, std::int64_t cols) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t r = blockIdx.x, c = (blockIdx.y * kThreads + threadIdx.x) * 8;
  if (c >= cols) return;
  union Pack {
    uint4 v;
    T h[8];
  };
  Pack g, u, o;
  g.v = *reinterpret_cast<const uint4*>(gate + r * gs + c);
  u.v = *reinterpret_cast<const uint4*>(up + r * us + c);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float x = to_f32(g.h[i]);
    o.h[i] = from_f32<T>((kGelu ? gelu_tanh(x) : silu(x)) * to_f32(u.h[i]));
  }
  *reinterpret_cast<uint4*>(out + r * os + c) = o.v;
}

__global__ void softcap_kernel(float* x, std::int64_t stride, std::int64_t cols, float cap) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t r = blockIdx.x, c = blockIdx.y * kThreads + threadIdx.x;
  if (c < cols) x[r * stride + c] = cap * tanhf(x[r * stride + c] / cap);
}

__global__ void gather_kernel(const float* x, std::int64_t xs, const std::int32_t* rows, float* out,
                              std::int64_t os, std::int64_t cols) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t r = blockIdx.x, c = blockIdx.y * kThreads + threadIdx.x;
  if (c < cols) out[r * os + c] = x[rows[r] * xs + c];
}

template <typename T>
__global__ void to_half_kernel(const float* x, std::int64_t xs, T* dst, std::int64_t cols) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t r = blockIdx.x, c = blockIdx.y * kThreads + threadIdx.x;
  if (c < cols) dst[r * cols + c] = from_f32<T>(x[r * xs + c]);
}

template <typename T>
__global__ void store_kv_kernel(T* kc, T* vc, std::int64_t row_width, std::int32_t block_size,
                                const float* k, std::int64_t ks, const float* v, std::int64_t vs,
                                DeviceBatch b) {
  pdl_trigger();
  pdl_wait();
  const std::int32_t t = blockIdx.x;
  const std::int32_t* info = b.seq_info + 4 * b.token_seq[t];
  const std::int32_t pos = info[2] + (t - info[0]);
  const std::int64_t row =
      std::int64_t{b.tables[info[3] + pos / block_size]} * block_size + pos % block_size;
  for (std::int64_t c = threadIdx.x; c < row_width; c += blockDim.x) {
    kc[row * row_width + c] = from_f32<T>(k[t * ks + c]);
    vc[row * row_width + c] = from_f32<T>(v[t * vs + c]);
  }
}

// One segment per blockIdx.y; the x blocks stride over its bytes.
__global__ void copy_segments_kernel(char* const* dst, const char* const* src, std::size_t bytes, bool aligned) {
  char* d = dst[blockIdx.y];
  const char* from = src[blockIdx.y];
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (aligned) {
    for (std::size_t i = first; i < bytes / 16; i += stride)
      reinterpret_cast<uint4*>(d)[i] = reinterpret_cast<const uint4*>(from)[i];
  } else {
    for (std::size_t i = first; i < bytes; i += stride) d[i] = from[i];
  }
}

}  // namespace

void launch_embed(const WeightRef& table, const std::int32_t* ids, float scale, TensorRef out, Stream s) {
  if (out.rows == 0) return;
  dispatch_float(table.dtype, [&](auto tag) {
    using T = decltype(tag);
    launch(embed_kernel<T>, grid_2d(out.rows, out.cols), kThreads, 0, s,
        static_cast<const T*>(table.data), table.cols, ids, scale, static_cast<float*>(out.data), out.stride);
  });
  AKV_CUDA_CHECK_LAUNCH();
}

void launch_add(TensorRef acc, TensorRef x, Stream s) {
  if (acc.rows == 0) return;
  launch(add_kernel, grid_2d(acc.rows, acc.cols), kThreads, 0, s,
      static_cast<float*>(acc.data), acc.stride, static_cast<const float*>(x.data), x.stride, acc.cols);
  AKV_CUDA_CHECK_LAUNCH();
}

void launch_add_bias(TensorRef out, const WeightRef& bias, Stream s) {
  if (out.rows == 0) return;
  dispatch_float(bias.dtype, [&](auto tag) {
    using T = decltype(tag);
    launch(add_bias_kernel<T>, grid_2d(out.rows, out.cols), kThreads, 0, s,
        static_cast<float*>(out.data), out.stride, static_cast<const T*>(bias.data), out.cols);
  });
  AKV_CUDA_CHECK_LAUNCH();
}

void launch_glu(TensorRef gate, TensorRef up, bool gelu, TensorRef out, Stream s) {
  if (out.rows == 0) return;
  const auto* gp = static_cast<const float*>(gate.data);
  const auto* upp = static_cast<const float*>(up.data);
  auto* op = static_cast<float*>(out.data);
  const bool vec = out.cols % 4 == 0 && gate.stride % 4 == 0 && up.stride % 4 == 0 && out.stride % 4 == 0 &&
                   (reinterpret_cast<std::uintptr_t>(gp) | reinterpret_cast<std::uintptr_t>(upp) |
                    reinterpret_cast<std::uintptr_t>(op)) % 16 == 0;
  if (vec) {
    const dim3 g = grid_2d(out.rows, out.cols / 4);
    if (gelu)
      launch(glu_vec_kernel<true>, g, kThreads, 0, s, gp, gate.stride, upp, up.stride, op, out.stride, out.cols);
    else
      launch(glu_vec_kernel<false>, g, kThreads, 0, s, gp, gate.stride, upp, up.stride, op, out.stride, out.cols);
  } else {
    const dim3 g = grid_2d(out.rows, out.cols);
    if (gelu)
      launch(glu_kernel<float, true>, g, kThreads, 0, s, gp, gate.stride, upp, up.stride, op, out.stride, out.cols);
    else
      launch(glu_kernel<float, false>, g, kThreads, 0, s, gp, gate.stride, upp, up.stride, op, out.stride, out.cols);
  }
  AKV_CUDA_CHECK_LAUNCH();
}

void launch_glu_quantize(TensorRef gate, TensorRef up, bool gelu, TensorRef out, QuantActivations a,
                         Stream s) {
  AKV_CHECK(out.cols % kQuantGroup == 0, "glu_quantize: cols a multiple of 32");
  AKV_CHECK(
      gate.rows == out.rows && up.rows == out.rows && gate.cols == out.cols && up.cols == out.cols,
      "glu_quantize shape");
  if (out.rows == 0) return;
  AKV_CHECK(out.rows * out.cols < (std::int64_t{1} << 31), "glu_quantize: too large");
  const std::int64_t threads = out.rows * out.cols;  // one per element, whole warps per group
  const auto* gp = static_cast<const float*>(gate.data);
  const auto* upp = static_cast<const float*>(up.data);
  auto* op = static_cast<float*>(out.data);
  const auto n = static_cast<std::int32_t>(out.rows);
  const auto cols = static_cast<std::int32_t>(out.cols);
  auto* scales = reinterpret_cast<float2*>(a.scales);
  if (gelu)
    launch(glu_quantize_kernel<true>, blocks_for(threads, kThreads), kThreads, 0, s, gp,
           gate.stride, upp, up.stride, op, out.stride, n, cols, a.codes, scales);
  else
    launch(glu_quantize_kernel<false>, blocks_for(threads, kThreads), kThreads, 0, s, gp,
           gate.stride, upp, up.stride, op, out.stride, n, cols, a.codes, scales);
  AKV_CUDA_CHECK_LAUNCH();
}

namespace {
template <typename T>
void launch_glu_typed(TensorRef gate, TensorRef up, bool gelu, TensorRef out, Stream s) {
  const auto* gp = static_cast<const T*>(gate.data);
  const auto* upp = static_cast<const T*>(up.data);
  auto* op = static_cast<T*>(out.data);
  const bool vec = out.cols % 8 == 0 && gate.stride % 8 == 0 && up.stride % 8 == 0 && out.stride % 8 == 0 &&
                   (reinterpret_cast<std::uintptr_t>(gp) | reinterpret_cast<std::uintptr_t>(upp) |
                    reinterpret_cast<std::uintptr_t>(op)) % 16 == 0;
  if (vec) {
    const dim3 g = grid_2d(out.rows, out.cols / 8);
    if (gelu)
      launch(glu_half_vec_kernel<T, true>, g, kThreads, 0, s, gp, gate.stride, upp, up.stride, op, out.stride,
             out.cols);
    else
      launch(glu_half_vec_kernel<T, false>, g, kThreads, 0, s, gp, gate.stride, upp, up.stride, op, out.stride,
             out.cols);
  } else {
    const dim3 g = grid_2d(out.rows, out.cols);
    if (gelu)
      launch(glu_kernel<T, true>, g, kThreads, 0, s, gp, gate.stride, upp, up.stride, op, out.stride, out.cols);
    else
      launch(glu_kernel<T, false>, g, kThreads, 0, s, gp, gate.stride, upp, up.stride, op, out.stride, out.cols);
  }
}
}  // namespace

void launch_glu_half(TensorRef gate, TensorRef up, bool gelu, TensorRef out, Stream s) {
  AKV_CHECK(gate.dtype == out.dtype && up.dtype == out.dtype, "glu_half: one dtype");
  if (out.rows == 0) return;
  if (out.dtype == DType::BF16)
    launch_glu_typed<__nv_bfloat16>(gate, up, gelu, out, s);
  else if (out.dtype == DType::F16)
    launch_glu_typed<__half>(gate, up, gelu, out, s);
  else
    AKV_CHECK(false, "glu_half: BF16 or F16 only");
  AKV_CUDA_CHECK_LAUNCH();
}

void launch_softcap(TensorRef x, float cap, Stream s) {
  if (x.rows == 0) return;
  launch(softcap_kernel, grid_2d(x.rows, x.cols), kThreads, 0, s, static_cast<float*>(x.data), x.stride, x.cols, cap);
  AKV_CUDA_CHECK_LAUNCH();
}

void launch_gather_rows(TensorRef x, const std::int32_t* rows, TensorRef out, Stream s) {
  if (out.rows == 0) return;
  launch(gather_kernel, grid_2d(out.rows, out.cols), kThreads, 0, s,
      static_cast<const float*>(x.data), x.stride, rows, static_cast<float*>(out.data), out.stride, out.cols);
  AKV_CUDA_CHECK_LAUNCH();
}

void launch_to_half(TensorRef x, DType dtype, void* dst, Stream s) {
  if (x.rows == 0) return;
  const dim3 g = grid_2d(x.rows, x.cols);
  const auto* xp = static_cast<const float*>(x.data);
  if (dtype == DType::BF16)
    launch(to_half_kernel<__nv_bfloat16>, g, kThreads, 0, s, xp, x.stride, static_cast<__nv_bfloat16*>(dst), x.cols);
  else if (dtype == DType::F16)
    launch(to_half_kernel<__half>, g, kThreads, 0, s, xp, x.stride, static_cast<__half*>(dst), x.cols);
  else
    AKV_CHECK(false, "to_half: BF16 or F16 only");
  AKV_CUDA_CHECK_LAUNCH();
}

void launch_store_kv(void* k_cache, void* v_cache, DType dtype, std::int64_t row_width,
                     std::int32_t block_size, TensorRef k, TensorRef v, const DeviceBatch& b, Stream s) {
  if (b.n_tokens == 0) return;
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    launch(store_kv_kernel<T>, b.n_tokens, 256, 0, s,
        static_cast<T*>(k_cache), static_cast<T*>(v_cache), row_width, block_size,
        static_cast<const float*>(k.data), k.stride, static_cast<const float*>(v.data), v.stride, b);
  });
  AKV_CUDA_CHECK_LAUNCH();
}

void launch_copy_segments(void* const* dst, const void* const* src, std::size_t bytes, int n_segments, bool aligned,
                          Stream s) {
  if (n_segments == 0 || bytes == 0) return;
  AKV_CHECK(n_segments < 65536, "too many segments for one launch");
  const std::size_t units = aligned ? bytes / 16 : bytes;
  const unsigned x_blocks = static_cast<unsigned>(std::min<std::size_t>((units + kThreads - 1) / kThreads, 64));
  launch(copy_segments_kernel, dim3(x_blocks, static_cast<unsigned>(n_segments)), kThreads, 0, s,
         reinterpret_cast<char* const*>(dst), reinterpret_cast<const char* const*>(src), bytes, aligned);
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
