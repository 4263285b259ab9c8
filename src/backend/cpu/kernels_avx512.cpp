// AVX-512 (F, BW, VL) versions of the weight-streaming kernels: the decode matmul and weight
// widening. Tails use masked loads, so no scalar remainder. Element-wise kernels come from
// the AVX2 table (they are not on the critical path).
// GCC 12 flags the deliberately undefined registers inside its own AVX-512 intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "backend/cpu/host_buffer.h"
#include "backend/cpu/kernels.h"

#define AKV_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

namespace akv {
namespace {

// Weights w[i..i+16) (the first `n` of them under mask, zeros after) as f32.
template <DType D>
AKV_AVX512 inline __m512 load16(const void* w, std::int64_t i, __mmask16 mask = 0xffff) {
  if constexpr (D == DType::F32) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(w) + i);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const std::uint16_t*>(w) + i);
    if constexpr (D == DType::BF16)
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    else
      return _mm512_cvtph_ps(h);
  }
}

template <DType D, int R>
AKV_AVX512 void gemv_tile(const GemvArgs& a, std::int64_t m0) {
  const std::int64_t K = a.k;
  const std::size_t row_bytes = static_cast<std::size_t>(K) * dtype_size(D);
  const void* w[R];
  for (int j = 0; j < R; ++j) w[j] = static_cast<const char*>(a.w) + (m0 + j) * row_bytes;
  const __mmask16 tail = static_cast<__mmask16>((1u << (K % 16)) - 1);
  for (std::int64_t r = 0; r < a.n_rows; ++r) {
    const float* x = a.x + r * a.x_stride;
    __m512 acc0[R], acc1[R];
#pragma GCC unroll 8
    for (int j = 0; j < R; ++j) acc0[j] = acc1[j] = _mm512_setzero_ps();
    std::int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
      const __m512 x0 = _mm512_loadu_ps(x + k), x1 = _mm512_loadu_ps(x + k + 16);
#pragma GCC unroll 8
      for (int j = 0; j < R; ++j) {
        acc0[j] = _mm512_fmadd_ps(load16<D>(w[j], k), x0, acc0[j]);
        acc1[j] = _mm512_fmadd_ps(load16<D>(w[j], k + 16), x1, acc1[j]);
      }
    }
    if (k + 16 <= K) {
      const __m512 x0 = _mm512_loadu_ps(x + k);
#pragma GCC unroll 8
      for (int j = 0; j < R; ++j) acc0[j] = _mm512_fmadd_ps(load16<D>(w[j], k), x0, acc0[j]);
      k += 16;
    }
    if (k < K) {
      const __m512 x0 = _mm512_maskz_loadu_ps(tail, x + k);
#pragma GCC unroll 8
      for (int j = 0; j < R; ++j) acc1[j] = _mm512_fmadd_ps(load16<D>(w[j], k, tail), x0, acc1[j]);
    }
    for (int j = 0; j < R; ++j) {
      float s = _mm512_reduce_add_ps(_mm512_add_ps(acc0[j], acc1[j]));
      if (a.bias != nullptr) s += load_f32(a.bias, a.bias_dtype, m0 + j);
      a.out[r * a.out_stride + m0 + j] = s;
    }
  }
}

template <DType D>
AKV_AVX512 void gemv_rows(const GemvArgs& a, std::int64_t m_begin, std::int64_t m_end) {
  std::int64_t m = m_begin;
  for (; m + 4 <= m_end; m += 4) gemv_tile<D, 4>(a, m);
  for (; m < m_end; ++m) gemv_tile<D, 1>(a, m);
}

AKV_AVX512 void gemv_avx512(const GemvArgs& a, std::int64_t m_begin, std::int64_t m_end) {
  switch (a.w_dtype) {
    case DType::F32: return gemv_rows<DType::F32>(a, m_begin, m_end);
    case DType::BF16: return gemv_rows<DType::BF16>(a, m_begin, m_end);
    case DType::F16: return gemv_rows<DType::F16>(a, m_begin, m_end);
    default: AKV_CHECK(false, "gemv: weight dtype");
  }
}

template <DType D>
AKV_AVX512 void to_f32_typed(const void* src, std::int64_t n, float* dst) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, load16<D>(src, i));
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(dst + i, tail, load16<D>(src, i, tail));
  }
}

AKV_AVX512 void to_f32_avx512(const void* src, DType dtype, std::int64_t n, float* dst) {
  switch (dtype) {
    case DType::F32: return to_f32_typed<DType::F32>(src, n, dst);
    case DType::BF16: return to_f32_typed<DType::BF16>(src, n, dst);
    case DType::F16: return to_f32_typed<DType::F16>(src, n, dst);
    default: AKV_CHECK(false, "to_f32: dtype");
  }
}

}  // namespace

const Kernels& avx512_kernels() {
  static const Kernels k = [] {
    Kernels t = avx2_kernels();
    t.gemv = gemv_avx512;
    t.to_f32 = to_f32_avx512;
    return t;
  }();
  return k;
}

}  // namespace akv
