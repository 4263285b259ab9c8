// AVX2 + FMA (+ F16C) kernels of the fast path. Every function carries its own target attribute
// so this file builds with the default flags; kernels_for() only hands them out when the CPU
// has the instructions. The AVX-512 table reuses the element-wise kernels from here.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/host_buffer.h"
#include "backend/cpu/kernels.h"
#include "base/check.h"

#define AKV_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace akv {
namespace {

// 8 weights at w[i..i+8) as f32 (bf16 and f16 widen exactly).
template <DType D>
AKV_AVX2 inline __m256 load8(const void* w, std::int64_t i) {
  if constexpr (D == DType::F32) {
    return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  } else {
    const __m128i h = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(w) + i));
    if constexpr (D == DType::BF16)
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    else
      return _mm256_cvtph_ps(h);
  }
}

AKV_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// One weight row m against every input row: out[r, m]. Four accumulators hide the FMA latency;
// the row is one linear stream (several rows at once run slower: more streams to prefetch).
template <DType D>
AKV_AVX2 void gemv_row(const GemvArgs& a, std::int64_t m) {
  const std::int64_t K = a.k;
  const void* w = static_cast<const char*>(a.w) + m * K * static_cast<std::int64_t>(dtype_size(D));
  const float b = a.bias != nullptr ? load_f32(a.bias, a.bias_dtype, m) : 0.0f;
  for (std::int64_t r = 0; r < a.n_rows; ++r) {
    const float* x = a.x + r * a.x_stride;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    std::int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
      acc0 = _mm256_fmadd_ps(load8<D>(w, k), _mm256_loadu_ps(x + k), acc0);
      acc1 = _mm256_fmadd_ps(load8<D>(w, k + 8), _mm256_loadu_ps(x + k + 8), acc1);
      acc2 = _mm256_fmadd_ps(load8<D>(w, k + 16), _mm256_loadu_ps(x + k + 16), acc2);
      acc3 = _mm256_fmadd_ps(load8<D>(w, k + 24), _mm256_loadu_ps(x + k + 24), acc3);
    }
    for (; k + 8 <= K; k += 8) acc0 = _mm256_fmadd_ps(load8<D>(w, k), _mm256_loadu_ps(x + k), acc0);
    float s = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; k < K; ++k) s += x[k] * load_f32(w, D, k);
    a.out[r * a.out_stride + m] = s + b;
  }
}

template <DType D>
AKV_AVX2 void gemv_rows(const GemvArgs& a, std::int64_t m_begin, std::int64_t m_end) {
  for (std::int64_t m = m_begin; m < m_end; ++m) gemv_row<D>(a, m);
}

AKV_AVX2 void gemv_avx2(const GemvArgs& a, std::int64_t m_begin, std::int64_t m_end) {
  switch (a.w_dtype) {
    case DType::F32: return gemv_rows<DType::F32>(a, m_begin, m_end);
    case DType::BF16: return gemv_rows<DType::BF16>(a, m_begin, m_end);
    case DType::F16: return gemv_rows<DType::F16>(a, m_begin, m_end);
    default: AKV_CHECK(false, "gemv: weight dtype");
  }
}

template <DType D>
AKV_AVX2 void to_f32_typed(const void* src, std::int64_t n, float* dst) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8<D>(src, i));
  for (; i < n; ++i) dst[i] = load_f32(src, D, i);
}

AKV_AVX2 void to_f32_avx2(const void* src, DType dtype, std::int64_t n, float* dst) {
  switch (dtype) {
    case DType::F32: return to_f32_typed<DType::F32>(src, n, dst);
    case DType::BF16: return to_f32_typed<DType::BF16>(src, n, dst);
    case DType::F16: return to_f32_typed<DType::F16>(src, n, dst);
    default: AKV_CHECK(false, "to_f32: dtype");
  }
}

// exp(x) to ~1 ulp (Cephes expf: range reduction by ln 2, degree-6 polynomial); 0 below
// -87.3 (the smallest normal result), so exp(-inf) = 0.
AKV_AVX2 inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3f), hi = _mm256_set1_ps(88.3f);
  const __m256 keep = _mm256_cmp_ps(x, lo, _CMP_GE_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), keep);
}

AKV_AVX2 float exp_sum_avx2(float* x, std::int64_t n, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float sum = hsum(acc);
  for (; i < n; ++i) sum += (x[i] = std::exp(x[i] - shift));
  return sum;
}

// act(g) * u with act(g) = g * sigmoid(z): z = g (silu) or 2k(g + 0.044715 g^3) (gelu_tanh).
AKV_AVX2 inline __m256 glu8(__m256 g, __m256 u, GluKind kind) {
  __m256 z = g;
  if (kind == GluKind::GeluTanh) {
    const __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
    z = _mm256_mul_ps(_mm256_set1_ps(2.0f * 0.7978845608028654f),
                      _mm256_fmadd_ps(g3, _mm256_set1_ps(0.044715f), g));
  }
  const __m256 den = _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(_mm256_sub_ps(_mm256_setzero_ps(), z)));
  return _mm256_mul_ps(_mm256_div_ps(g, den), u);
}

AKV_AVX2 void glu_avx2(const float* g, const float* u, float* y, std::int64_t n, GluKind kind) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, glu8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i), kind));
  if (i < n) {  // tail through a padded copy so it rounds like the body
    alignas(32) float gt[8] = {}, ut[8] = {}, yt[8];
    for (std::int64_t t = i; t < n; ++t) gt[t - i] = g[t], ut[t - i] = u[t];
    _mm256_store_ps(yt, glu8(_mm256_load_ps(gt), _mm256_load_ps(ut), kind));
    for (std::int64_t t = i; t < n; ++t) y[t] = yt[t - i];
  }
}

AKV_AVX2 float sum_squares_avx2(const float* x, std::int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
  }
  float s = hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += x[i] * x[i];
  return s;
}

// argmax_row in two passes: the largest value (max_ps(v, m) keeps m where v is NaN, and m starts
// at x[0], so NaNs never enter it), then the first id holding it. Equal to the scalar scan:
// its pick is the first occurrence of that maximum (+0 and -0 compare equal in both).
AKV_AVX2 std::int32_t argmax_avx2(const float* x, std::int64_t n) {
  if (std::isnan(x[0])) return 0;
  __m256 m0 = _mm256_set1_ps(x[0]), m1 = m0, m2 = m0, m3 = m0;
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
    m2 = _mm256_max_ps(_mm256_loadu_ps(x + i + 16), m2);
    m3 = _mm256_max_ps(_mm256_loadu_ps(x + i + 24), m3);
  }
  const __m256 m = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
  float lanes[8];
  _mm256_storeu_ps(lanes, m);
  float best = lanes[0];
  for (float v : lanes) best = std::max(best, v);
  for (; i < n; ++i) best = std::max(best, x[i]);  // keeps best when x[i] is NaN
  const __m256 target = _mm256_set1_ps(best);
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + j), target, _CMP_EQ_OQ));
    if (hit != 0) return static_cast<std::int32_t>(j + __builtin_ctz(static_cast<unsigned>(hit)));
  }
  for (; j < n; ++j)
    if (x[j] == best) return static_cast<std::int32_t>(j);
  AKV_CHECK(false, "argmax: the maximum was not found");
  return 0;
}

}  // namespace

const Kernels& avx2_kernels() {
  static const Kernels k{gemv_avx2, to_f32_avx2,      exp_sum_avx2,
                         glu_avx2,  sum_squares_avx2, argmax_avx2};
  return k;
}

}  // namespace akv
