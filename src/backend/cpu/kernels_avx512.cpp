// AVX-512 (F, BW, VL) versions of the weight-streaming kernels: the decode matmul and weight
// widening. Tails use masked loads, so no scalar remainder. Element-wise kernels come from
// the AVX2 table (they are not on the critical path).
// GCC 12 flags the deliberately undefined registers inside its own AVX-512 intrinsics.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
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

// One weight row m against every input row: out[r, m]. Four accumulators hide the FMA latency;
// the row is one linear stream (several rows at once run slower: more streams to prefetch).
template <DType D>
AKV_AVX512 void gemv_row(const GemvArgs& a, std::int64_t m) {
  const std::int64_t K = a.k;
  const void* w = static_cast<const char*>(a.w) + m * K * static_cast<std::int64_t>(dtype_size(D));
  const __mmask16 tail = static_cast<__mmask16>((1u << (K % 16)) - 1);
  const float b = a.bias != nullptr ? load_f32(a.bias, a.bias_dtype, m) : 0.0f;
  for (std::int64_t r = 0; r < a.n_rows; ++r) {
    const float* x = a.x + r * a.x_stride;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    std::int64_t k = 0;
    for (; k + 64 <= K; k += 64) {
      acc0 = _mm512_fmadd_ps(load16<D>(w, k), _mm512_loadu_ps(x + k), acc0);
      acc1 = _mm512_fmadd_ps(load16<D>(w, k + 16), _mm512_loadu_ps(x + k + 16), acc1);
      acc2 = _mm512_fmadd_ps(load16<D>(w, k + 32), _mm512_loadu_ps(x + k + 32), acc2);
      acc3 = _mm512_fmadd_ps(load16<D>(w, k + 48), _mm512_loadu_ps(x + k + 48), acc3);
    }
    for (; k + 16 <= K; k += 16) acc0 = _mm512_fmadd_ps(load16<D>(w, k), _mm512_loadu_ps(x + k), acc0);
    if (k < K) acc1 = _mm512_fmadd_ps(load16<D>(w, k, tail), _mm512_maskz_loadu_ps(tail, x + k), acc1);
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3));
    a.out[r * a.out_stride + m] = _mm512_reduce_add_ps(sum) + b;
  }
}

template <DType D>
AKV_AVX512 void gemv_rows(const GemvArgs& a, std::int64_t m_begin, std::int64_t m_end) {
  for (std::int64_t m = m_begin; m < m_end; ++m) gemv_row<D>(a, m);
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
