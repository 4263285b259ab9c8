// The int8/int4 slab codec of kv_codec.h for AVX2 + F16C, byte-equal to the reference in
// kv_codec.cpp (kv_codec_parity_test). Built with the default flags and handed out only when the
// CPU has the instructions. No FMA: a fused multiply-add rounds differently from the reference.
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/kv_codec_quant.h"

#define AKV_CODEC_TARGET __attribute__((target("avx2,f16c")))

namespace akv::kv_codec_detail {
namespace {

AKV_CODEC_TARGET inline __m256i i32(int v) {
  return _mm256_set1_epi32(v);
}

// 8 elements of the slab from element i, as f32 (exact).
template <DType T>
AKV_CODEC_TARGET inline __m256 load8(const std::byte* raw, std::int64_t i) {
  if constexpr (T == DType::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(raw + 4 * i));
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(raw + 2 * i));
    if constexpr (T == DType::BF16)
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    else
      return _mm256_cvtph_ps(h);
  }
}

// Rounded as store_elem does (bf16: nearest even, NaN kept quiet; f16: f32_to_f16).
template <DType T>
AKV_CODEC_TARGET inline void store8(std::byte* raw, std::int64_t i, __m256 x) {
  if constexpr (T == DType::F32) {
    _mm256_storeu_ps(reinterpret_cast<float*>(raw + 4 * i), x);
  } else if constexpr (T == DType::BF16) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, i32(0x7fffffff)), i32(0x7f800000));
    const __m256i bias =
        _mm256_add_epi32(i32(0x7fff), _mm256_and_si256(_mm256_srli_epi32(u, 16), i32(1)));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), i32(0x40));
    const __m256i h = _mm256_blendv_epi8(rounded, quiet, nan);
    const __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(raw + 2 * i), packed);
  } else {
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) == 0) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(raw + 2 * i),
                       _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
      return;
    }
    alignas(32) float f[8];  // a NaN's f16 form is f32_to_f16's, not the instruction's
    _mm256_store_ps(f, x);
    for (int j = 0; j < 8; ++j) {
      const std::uint16_t h = f32_to_f16(f[j]);
      std::memcpy(raw + 2 * (i + j), &h, 2);
    }
  }
}

// All-ones lanes where v is an infinity or NaN.
AKV_CODEC_TARGET inline __m256i not_finite(__m256 v) {
  return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), i32(0x7f800000)),
                            i32(0x7f800000));
}

// The reference's quantize: clamp(nearbyint((v - min) / scale), 0, max_code); 0 where !(scale > 0).
AKV_CODEC_TARGET inline __m256i quantize8(__m256 v, __m256 min, __m256 scale, __m256 max_code) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256 r = _mm256_round_ps(_mm256_div_ps(_mm256_sub_ps(v, min), scale),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 c = _mm256_min_ps(_mm256_max_ps(r, zero), max_code);  // max_ps(NaN, 0) = 0, as fmax
  return _mm256_cvttps_epi32(_mm256_and_ps(c, _mm256_cmp_ps(scale, zero, _CMP_GT_OQ)));
}

// 32 codes (0..255, in four vectors of 8, in element order) -> 32 bytes in that order.
AKV_CODEC_TARGET inline __m256i pack_bytes(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Stores 32 codes at element i of `codes`: a byte each (8 bits) or two a byte, low nibble first.
AKV_CODEC_TARGET inline void store_codes(std::byte* codes, int bits, std::int64_t i,
                                         const __m256i q[4]) {
  const __m256i bytes = pack_bytes(q[0], q[1], q[2], q[3]);
  if (bits == 8) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), bytes);
    return;
  }
  // 16-bit lanes hold code 2j | code 2j+1 << 8: fold to code 2j | code 2j+1 << 4.
  const __m256i folded =
      _mm256_or_si256(_mm256_and_si256(bytes, _mm256_set1_epi16(0x00FF)),
                      _mm256_and_si256(_mm256_srli_epi16(bytes, 4), _mm256_set1_epi16(0x00F0)));
  const __m128i out =
      _mm_packus_epi16(_mm256_castsi256_si128(folded), _mm256_extracti128_si256(folded, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i / 2), out);
}

// 8 codes from element i (i a multiple of 8), as f32.
AKV_CODEC_TARGET inline __m256 load_codes(const std::byte* codes, int bits, std::int64_t i) {
  if (bits == 8)
    return _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i))));
  std::int32_t w;
  std::memcpy(&w, codes + i / 2, 4);
  const __m256i n =
      _mm256_srlv_epi32(_mm256_set1_epi32(w), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
  return _mm256_cvtepi32_ps(_mm256_and_si256(n, i32(0xF)));
}

AKV_CODEC_TARGET inline float hmin(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_min_ss(m, _mm_shuffle_ps(m, m, 1)));
}
AKV_CODEC_TARGET inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}

// bf16_at_least per lane (finite x), as 32-bit lanes holding the bf16 bits.
AKV_CODEC_TARGET inline __m256i at_least(__m256 x) {
  const __m256i t = _mm256_srli_epi32(_mm256_castps_si256(x), 16);
  const __m256 back = _mm256_castsi256_ps(_mm256_slli_epi32(t, 16));
  const __m256i below = _mm256_castps_si256(_mm256_cmp_ps(back, x, _CMP_NGE_UQ));
  return _mm256_sub_epi32(t, below);  // below is -1 where the truncation fell short: one ulp up
}
AKV_CODEC_TARGET inline __m256 bf16_bits_to_f32(__m256i b) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(b, 16));
}

// Keys: a group per channel over the slab's tokens. 32 channels at a time: their range over the
// tokens, their parameters, then their codes, with the parameters in registers.
template <DType T>
AKV_CODEC_TARGET bool encode_keys(const QuantSlab& s, const std::byte* raw, std::byte* out) {
  const std::int64_t w = s.width, n = s.n_tokens;
  std::byte* codes = out + w * static_cast<std::int64_t>(kParamBytes);
  const __m256 steps = _mm256_set1_ps(static_cast<float>((1 << s.bits) - 1));
  const __m256 zero = _mm256_setzero_ps();
  for (std::int64_t c = 0; c < w; c += 32) {
    __m256 lo[4], hi[4];
    __m256i bad = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) lo[j] = hi[j] = load8<T>(raw, c + 8 * j);
    for (std::int64_t t = 0; t < n; ++t)
      for (int j = 0; j < 4; ++j) {
        const __m256 v = load8<T>(raw, t * w + c + 8 * j);
        bad = _mm256_or_si256(bad, not_finite(v));
        lo[j] = _mm256_min_ps(v, lo[j]);
        hi[j] = _mm256_max_ps(v, hi[j]);
      }
    if (!_mm256_testz_si256(bad, bad)) return false;
    __m256 min[4], scale[4];
    for (int j = 0; j < 4; ++j) {
      // bf16_at_most(lo + 0) = bf16_at_least(-(lo + 0)) ^ 0x8000; then the scale over the range.
      const __m256 l = _mm256_add_ps(lo[j], zero), h = _mm256_add_ps(hi[j], zero);
      const __m256i min_bits =
          _mm256_xor_si256(at_least(_mm256_xor_ps(l, _mm256_set1_ps(-0.0f))), i32(0x8000));
      min[j] = bf16_bits_to_f32(min_bits);
      const __m256i scale_bits = at_least(_mm256_div_ps(_mm256_sub_ps(h, min[j]), steps));
      scale[j] = bf16_bits_to_f32(scale_bits);
      const __m256i word = _mm256_or_si256(_mm256_and_si256(scale_bits, i32(0xFFFF)),
                                           _mm256_slli_epi32(min_bits, 16));
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(out + (c + 8 * j) * static_cast<std::int64_t>(kParamBytes)),
          word);
    }
    for (std::int64_t t = 0; t < n; ++t) {
      __m256i q[4];
      for (int j = 0; j < 4; ++j)
        q[j] = quantize8(load8<T>(raw, t * w + c + 8 * j), min[j], scale[j], steps);
      store_codes(codes, s.bits, t * w + c, q);
    }
  }
  return true;
}

// Values: a group per token, over the whole row or runs of 32 channels.
template <DType T>
AKV_CODEC_TARGET bool encode_values(const QuantSlab& s, const std::byte* raw, std::byte* out) {
  const std::int64_t w = s.width, n = s.n_tokens, run = s.value_channels;
  const std::int64_t n_groups = n * (w / run);
  std::byte* codes = out + n_groups * static_cast<std::int64_t>(kParamBytes);
  const __m256 steps = _mm256_set1_ps(static_cast<float>((1 << s.bits) - 1));
  for (std::int64_t t = 0; t < n; ++t) {
    const std::byte* row = raw + t * w * static_cast<std::int64_t>(dtype_size(T));
    for (std::int64_t g = 0; g < w; g += run) {
      __m256 lo = load8<T>(row, g), hi = lo;
      __m256i bad = _mm256_setzero_si256();
      for (std::int64_t c = g; c < g + run; c += 8) {
        const __m256 v = load8<T>(row, c);
        bad = _mm256_or_si256(bad, not_finite(v));
        lo = _mm256_min_ps(v, lo);
        hi = _mm256_max_ps(v, hi);
      }
      if (!_mm256_testz_si256(bad, bad)) return false;
      const std::int64_t k = t * (w / run) + g / run;
      const GroupParams p = fit_params(hmin(lo) + 0.0f, hmax(hi) + 0.0f, s.bits,
                                       out + k * static_cast<std::int64_t>(kParamBytes));
      const __m256 min = _mm256_set1_ps(p.min), scale = _mm256_set1_ps(p.scale);
      for (std::int64_t c = g; c < g + run; c += 32) {
        __m256i q[4];
        for (int j = 0; j < 4; ++j) q[j] = quantize8(load8<T>(row, c + 8 * j), min, scale, steps);
        store_codes(codes, s.bits, t * w + c, q);
      }
    }
  }
  return true;
}

template <DType T>
AKV_CODEC_TARGET void decode_slab(const QuantSlab& s, const std::byte* in, std::byte* raw) {
  const std::int64_t w = s.width, n = s.n_tokens;
  const std::int64_t run = s.keys ? 1 : s.value_channels;
  const std::int64_t n_groups = s.keys ? w : n * (w / run);
  const std::byte* codes = in + n_groups * static_cast<std::int64_t>(kParamBytes);
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t c = 0; c < w; c += 8) {
      __m256i word;  // the 8 elements' parameters
      if (s.keys) {
        word = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(in + c * static_cast<std::int64_t>(kParamBytes)));
      } else {
        std::int32_t p;
        std::memcpy(&p, in + (t * (w / run) + c / run) * static_cast<std::int64_t>(kParamBytes), 4);
        word = _mm256_set1_epi32(p);
      }
      const __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(word, 16));
      const __m256 min =
          _mm256_castsi256_ps(_mm256_and_si256(word, i32(static_cast<int>(0xFFFF0000u))));
      const __m256 x =
          _mm256_add_ps(min, _mm256_mul_ps(scale, load_codes(codes, s.bits, t * w + c)));
      store8<T>(raw, t * w + c, x);
    }
}

bool takes(const QuantSlab& s) {
  return s.width % 32 == 0 && s.width > 0 && s.n_tokens > 0 && (s.bits == 8 || s.bits == 4) &&
         (s.keys || s.value_channels == s.width || s.value_channels == 32);
}

template <DType T>
bool encode_as(const QuantSlab& s, const std::byte* raw, std::byte* out) {
  return s.keys ? encode_keys<T>(s, raw, out) : encode_values<T>(s, raw, out);
}

bool encode(const QuantSlab& s, const std::byte* raw, std::byte* out) {
  if (!takes(s)) return false;
  switch (s.dtype) {
    case DType::F32:
      return encode_as<DType::F32>(s, raw, out);
    case DType::BF16:
      return encode_as<DType::BF16>(s, raw, out);
    case DType::F16:
      return encode_as<DType::F16>(s, raw, out);
    default:
      return false;
  }
}

// A stored scale or minimum that is an infinity or NaN (a block whose input was not finite):
// the reference decodes it (NaN payloads are its business).
bool params_finite(const QuantSlab& s, const std::byte* in) {
  const std::int64_t n_groups = s.keys ? s.width : s.n_tokens * (s.width / s.value_channels);
  for (std::int64_t k = 0; k < n_groups; ++k) {
    std::uint32_t p;
    std::memcpy(&p, in + k * static_cast<std::int64_t>(kParamBytes), 4);
    if ((p & 0x7F80u) == 0x7F80u || (p & 0x7F800000u) == 0x7F800000u) return false;
  }
  return true;
}

bool decode(const QuantSlab& s, const std::byte* in, std::byte* raw) {
  if (!takes(s) || !params_finite(s, in)) return false;
  switch (s.dtype) {
    case DType::F32:
      decode_slab<DType::F32>(s, in, raw);
      return true;
    case DType::BF16:
      decode_slab<DType::BF16>(s, in, raw);
      return true;
    case DType::F16:
      decode_slab<DType::F16>(s, in, raw);
      return true;
    default:
      return false;
  }
}

}  // namespace

const QuantSlabKernels* find_quant_slab_kernels_avx2() {
  static const QuantSlabKernels k{encode, decode, "avx2"};
  return isa_supported(Isa::Avx2) ? &k : nullptr;
}

}  // namespace akv::kv_codec_detail
