// Dequantization of whole quantized weights to bf16 (quant_dequant.h). One thread per eight
// consecutive elements (one 16-byte store); each element is the scalar oracle's expression
// (tensor/dequantize.cpp) with explicitly rounded operations, so no multiply-add is fused.
#include <cuda_bf16.h>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/quant_dequant.h"
#include "backend/cuda/quant_device.cuh"

namespace akv::cuda {
namespace {

using namespace quant;

// Element j of a 32-element block whose 4-bit codes sit as in Q4_0.
__device__ __forceinline__ int nibble32(const std::uint8_t* qs, int j) {
  return j < 16 ? (qs[j] & 0xf) : (qs[j - 16] >> 4);
}
// Element j of a 256-element block of 4-bit codes.
__device__ __forceinline__ int nibble256(const std::uint8_t* qs, int j) {
  return (qs[(j / 64) * 32 + j % 32] >> (4 * ((j % 64) / 32))) & 0xf;
}

// out[i] = element j0 + i of block b, i < 8 (j0 a multiple of 8).
template <GgmlType T>
__device__ void dequant8(const std::uint8_t* b, int j0, float* out);

template <>
__device__ void dequant8<GgmlType::Q8_0>(const std::uint8_t* b, int j0, float* out) {
  const float d = f16_at(b);
  for (int i = 0; i < 8; ++i) out[i] = __fmul_rn(d, static_cast<float>(static_cast<std::int8_t>(b[2 + j0 + i])));
}

template <>
__device__ void dequant8<GgmlType::Q4_0>(const std::uint8_t* b, int j0, float* out) {
  const float d = f16_at(b);
  for (int i = 0; i < 8; ++i) out[i] = __fmul_rn(d, static_cast<float>(nibble32(b + 2, j0 + i) - 8));
}

template <>
__device__ void dequant8<GgmlType::MXFP4>(const std::uint8_t* b, int j0, float* out) {
  constexpr std::int8_t kValues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const float d = e8m0_half(b[0]);
  for (int i = 0; i < 8; ++i) out[i] = __fmul_rn(d, static_cast<float>(kValues[nibble32(b + 1, j0 + i)]));
}

template <>
__device__ void dequant8<GgmlType::Q4_K>(const std::uint8_t* b, int j0, float* out) {
  int sc = 0, m = 0;
  k_scale_min(b + 4, j0 / 32, sc, m);
  const float dl = __fmul_rn(f16_at(b), static_cast<float>(sc));
  const float ml = __fmul_rn(f16_at(b + 2), static_cast<float>(m));
  for (int i = 0; i < 8; ++i) out[i] = __fsub_rn(__fmul_rn(dl, static_cast<float>(nibble256(b + 16, j0 + i))), ml);
}

template <>
__device__ void dequant8<GgmlType::Q5_K>(const std::uint8_t* b, int j0, float* out) {
  int sc = 0, m = 0;
  k_scale_min(b + 4, j0 / 32, sc, m);
  const float dl = __fmul_rn(f16_at(b), static_cast<float>(sc));
  const float ml = __fmul_rn(f16_at(b + 2), static_cast<float>(m));
  const std::uint8_t* qh = b + 16;
  for (int i = 0; i < 8; ++i) {
    const int j = j0 + i;
    const int q = nibble256(b + 48, j) | (((qh[j % 32] >> (j / 32)) & 1) << 4);
    out[i] = __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
  }
}

template <>
__device__ void dequant8<GgmlType::Q6_K>(const std::uint8_t* b, int j0, float* out) {
  const float dl = __fmul_rn(f16_at(b + 208), static_cast<float>(static_cast<std::int8_t>(b[192 + j0 / 16])));
  for (int i = 0; i < 8; ++i) {
    const int j = j0 + i, half = j / 128, r = j % 128;
    const int lo = (b[half * 64 + r % 64] >> (4 * (r / 64))) & 0xf;
    const int hi = (b[128 + half * 32 + r % 32] >> (2 * (r / 32))) & 3;
    out[i] = __fmul_rn(dl, static_cast<float>((lo | (hi << 4)) - 32));
  }
}

template <GgmlType T>
__global__ void dequantize_bf16_kernel(const std::uint8_t* __restrict__ w, std::int64_t row_bytes,
                                       std::int64_t rows, std::int64_t cols, uint4* __restrict__ dst) {
  using G = Geometry<T>;
  pdl_trigger();
  const std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;  // 8-element group
  if (i >= rows * cols / 8) return;
  const std::int64_t e = i * 8, r = e / cols, c = e % cols;
  const std::uint8_t* b = w + r * row_bytes + (c / G::kElems) * G::kBytes;
  float v[8];
  dequant8<T>(b, static_cast<int>(c % G::kElems), v);
  pdl_wait();  // the previous reader of dst (a GEMM) has finished
  uint4 out;
  unsigned* o = &out.x;
  for (int k = 0; k < 4; ++k) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
    o[k] = *reinterpret_cast<const unsigned*>(&p);
  }
  dst[i] = out;
}

// out[t, :] = scale * row ids[t] of the table, one thread per eight elements.
template <GgmlType T>
__global__ void embed_kernel(const std::uint8_t* __restrict__ w, std::int64_t row_bytes, std::int64_t cols,
                             const std::int32_t* __restrict__ ids, std::int64_t n, float scale,
                             float* __restrict__ out, std::int64_t out_stride) {
  using G = Geometry<T>;
  pdl_trigger();
  pdl_wait();
  const std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n * cols / 8) return;
  const std::int64_t t = i / (cols / 8), c = i % (cols / 8) * 8;
  const std::uint8_t* b = w + ids[t] * row_bytes + (c / G::kElems) * G::kBytes;
  float v[8];
  dequant8<T>(b, static_cast<int>(c % G::kElems), v);
  for (int k = 0; k < 8; ++k) out[t * out_stride + c + k] = __fmul_rn(v[k], scale);
}

// Calls f(Tag<T>{}) for a supported block type.
template <GgmlType T>
struct Tag {
  static constexpr GgmlType kType = T;
};
template <typename F>
void dispatch_quant(GgmlType t, F&& f) {
  switch (t) {
    case GgmlType::Q8_0: return f(Tag<GgmlType::Q8_0>{});
    case GgmlType::Q4_0: return f(Tag<GgmlType::Q4_0>{});
    case GgmlType::MXFP4: return f(Tag<GgmlType::MXFP4>{});
    case GgmlType::Q4_K: return f(Tag<GgmlType::Q4_K>{});
    case GgmlType::Q5_K: return f(Tag<GgmlType::Q5_K>{});
    case GgmlType::Q6_K: return f(Tag<GgmlType::Q6_K>{});
    default: AKV_CHECK(false, "quantized CUDA kernels: unsupported type");
  }
}

template <GgmlType T>
void launch_typed(const QuantWeight& w, void* dst, cudaStream_t s) {
  constexpr int kThreads = 256;
  launch(dequantize_bf16_kernel<T>, dim3(blocks_for(w.rows * w.cols / 8, kThreads)), dim3(kThreads), 0, s,
         static_cast<const std::uint8_t*>(w.data), quant_row_bytes(w.type, w.cols), w.rows, w.cols,
         static_cast<uint4*>(dst));
}

}  // namespace

void launch_dequantize_bf16(const QuantWeight& w, void* dst, cudaStream_t s) {
  AKV_CHECK(reinterpret_cast<std::uintptr_t>(dst) % 16 == 0, "dequantize: 16-byte aligned destination");
  if (w.rows == 0) return;
  dispatch_quant(w.type, [&](auto tag) { launch_typed<decltype(tag)::kType>(w, dst, s); });
}

void launch_embed_quantized(const QuantWeight& table, const std::int32_t* ids, std::int64_t n, float scale,
                            float* out, std::int64_t out_stride, cudaStream_t s) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  dispatch_quant(table.type, [&](auto tag) {
    constexpr GgmlType T = decltype(tag)::kType;
    launch(embed_kernel<T>, dim3(blocks_for(n * table.cols / 8, kThreads)), dim3(kThreads), 0, s,
           static_cast<const std::uint8_t*>(table.data), quant_row_bytes(T, table.cols), table.cols, ids, n, scale,
           out, out_stride);
  });
}

}  // namespace akv::cuda
