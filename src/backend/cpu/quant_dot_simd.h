// The bodies of the integer dot kernels (quant_dot.h), written once and compiled twice: by
// quant_dot_avx2.cpp (AKV_QDOT_VNNI 0: maddubs + madd) and quant_dot_vnni.cpp (AKV_QDOT_VNNI 1:
// the AVX-512 VNNI dpbusd/dpwssd forms, 256-bit). Each includer defines AKV_QDOT_TARGET (the
// target attribute) and AKV_QDOT_VNNI, and includes this inside its own namespace.
// Integer sums are exact in both forms: u8 x s8 pairs stay inside int16 (|w| <= 128 for Q8_0
// by the sign trick, <= 63 otherwise, |x| <= 127), and every block's int32 sum is far from
// overflow.
#if !defined(AKV_QDOT_TARGET) || !defined(AKV_QDOT_VNNI)
#error "define AKV_QDOT_TARGET and AKV_QDOT_VNNI before including quant_dot_simd.h"
#endif

// i32x8: sums of u8 * s8 over each group of 4 bytes.
AKV_QDOT_TARGET inline __m256i dot_us8(__m256i u, __m256i s) {
#if AKV_QDOT_VNNI
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// acc + i32x8 sums of u8 * s8 over each group of 4 bytes, each pair weighted by the int16 of
// `scale` at its position (a per-sub-block scale broadcast over its bytes' pairs).
AKV_QDOT_TARGET inline __m256i dot_us8_scaled(__m256i acc, __m256i u, __m256i s, __m256i scale) {
#if AKV_QDOT_VNNI
  return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, s), scale);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale));
#endif
}

AKV_QDOT_TARGET inline float h2f(std::uint16_t h) {
  return _cvtsh_ss(h);
}

AKV_QDOT_TARGET inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

AKV_QDOT_TARGET inline int hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

AKV_QDOT_TARGET inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// 32 nibbles of a Q4_0-style 16-byte array: elements 0..15 the low nibbles, 16..31 the high.
AKV_QDOT_TARGET inline __m256i nibbles32(const std::uint8_t* qs) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0f));
}

// Byte j = 16 where bit j of the 32-bit qh is set, else 0.
AKV_QDOT_TARGET inline __m256i high_bits32(std::uint32_t qh) {
  const __m256i shuf =
      _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), shuf);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit),
                          _mm256_set1_epi8(16));
}

// acc + the dot of one Q8_0 block with its input block, as 8 f32 partial sums.
AKV_QDOT_TARGET inline __m256 block_q8_0(const quant::BlockQ8_0& w, const ActBlock32& a,
                                         __m256 acc) {
  const __m256i wq = load256(w.qs), aq = load256(a.qs);
  // |w| as u8 (128 for -128) times x with w's sign: the same products, maddubs-ready.
  const __m256i p = dot_us8(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(aq, wq));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(w.d) * a.d), acc);
}

// Q4_0 and Q5_0: d * (q - offset) with q unsigned: sum q x - offset * sum x.
template <int kOffset, typename Block>
AKV_QDOT_TARGET inline __m256 block_q4_5(const Block& w, const ActBlock32& a, __m256 acc) {
  __m256i q = nibbles32(w.qs);
  if constexpr (kOffset == 16) {
    std::uint32_t qh;
    std::memcpy(&qh, w.qh, 4);
    q = _mm256_or_si256(q, high_bits32(qh));
  }
  // sum (q - offset) x = sum q x - offset * sum x, the second term (exact) taken from lane 0.
  const __m256i p = _mm256_sub_epi32(dot_us8(q, load256(a.qs)),
                                     _mm256_setr_epi32(kOffset * a.sum, 0, 0, 0, 0, 0, 0, 0));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(w.d) * a.d), acc);
}

// Two accumulators: consecutive blocks do not wait on each other's FMA.
template <typename Block, __m256 (*kBlock)(const Block&, const ActBlock32&, __m256)>
AKV_QDOT_TARGET inline float dot_blocks32(const void* w_row, const void* act_row, std::int64_t nb) {
  const auto* w = static_cast<const Block*>(w_row);
  const auto* a = static_cast<const ActBlock32*>(act_row);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 1 < nb; i += 2) {
    acc0 = kBlock(w[i], a[i], acc0);
    acc1 = kBlock(w[i + 1], a[i + 1], acc1);
  }
  if (i < nb) acc0 = kBlock(w[i], a[i], acc0);
  return hsum_ps(_mm256_add_ps(acc0, acc1));
}

AKV_QDOT_TARGET float dot_q8_0(const void* w_row, const void* act_row, std::int64_t nb) {
  return dot_blocks32<quant::BlockQ8_0, block_q8_0>(w_row, act_row, nb);
}

AKV_QDOT_TARGET float dot_q4_0(const void* w_row, const void* act_row, std::int64_t nb) {
  return dot_blocks32<quant::BlockQ4_0, block_q4_5<8, quant::BlockQ4_0>>(w_row, act_row, nb);
}

AKV_QDOT_TARGET float dot_q5_0(const void* w_row, const void* act_row, std::int64_t nb) {
  return dot_blocks32<quant::BlockQ5_0, block_q4_5<16, quant::BlockQ5_0>>(w_row, act_row, nb);
}

// The 8 six-bit scales and mins of a Q4_K/Q5_K block (quant_blocks.h's packing).
inline void k_scales_mins(const std::uint8_t* sc, std::int16_t* scale, std::int16_t* min) {
  for (int s = 0; s < 4; ++s) {
    scale[s] = sc[s] & 0x3f;
    min[s] = sc[s + 4] & 0x3f;
  }
  for (int s = 4; s < 8; ++s) {
    scale[s] = static_cast<std::int16_t>((sc[s + 4] & 0xf) | ((sc[s - 4] >> 2) & 0x30));
    min[s] = static_cast<std::int16_t>((sc[s + 4] >> 4) | ((sc[s] >> 2) & 0x30));
  }
}

// Q4_K (kHighBit false) and Q5_K: x = d sc_s q - dmin m_s over 8 sub-blocks of 32; chunk c of
// 32 bytes holds sub-block 2c in its low nibbles and 2c + 1 in its high ones.
template <bool kHighBit>
AKV_QDOT_TARGET float dot_k4(const std::uint16_t* dd, const std::uint8_t* scales,
                             const std::uint8_t* qh, const std::uint8_t* qs, const ActBlock256& a) {
  std::int16_t sc[8], mn[8];
  k_scales_mins(scales, sc, mn);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i bits = kHighBit ? load256(qh) : _mm256_setzero_si256();
  __m256i acc = _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    const __m256i q = load256(qs + 32 * c);
    __m256i lo = _mm256_and_si256(q, low4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
    if constexpr (kHighBit) {
      const __m256i one = _mm256_set1_epi8(1);
      lo = _mm256_or_si256(
          lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bits, 2 * c), one), 4));
      hi = _mm256_or_si256(
          hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bits, 2 * c + 1), one), 4));
    }
    acc = dot_us8_scaled(acc, lo, load256(a.qs + 64 * c), _mm256_set1_epi16(sc[2 * c]));
    acc = dot_us8_scaled(acc, hi, load256(a.qs + 64 * c + 32), _mm256_set1_epi16(sc[2 * c + 1]));
  }
  int mins = 0;
  for (int s = 0; s < 8; ++s) mins += mn[s] * (a.bsums[2 * s] + a.bsums[2 * s + 1]);
  return h2f(dd[0]) * a.d * static_cast<float>(hsum_epi32(acc)) -
         h2f(dd[1]) * a.d * static_cast<float>(mins);
}

AKV_QDOT_TARGET float dot_q4_k(const void* w_row, const void* act_row, std::int64_t nb) {
  const auto* w = static_cast<const quant::BlockQ4_K*>(w_row);
  const auto* a = static_cast<const ActBlock256*>(act_row);
  float sum = 0.0f;
  for (std::int64_t i = 0; i < nb; ++i)
    sum += dot_k4<false>(&w[i].d, w[i].scales, nullptr, w[i].qs, a[i]);
  return sum;
}

AKV_QDOT_TARGET float dot_q5_k(const void* w_row, const void* act_row, std::int64_t nb) {
  const auto* w = static_cast<const quant::BlockQ5_K*>(w_row);
  const auto* a = static_cast<const ActBlock256*>(act_row);
  float sum = 0.0f;
  for (std::int64_t i = 0; i < nb; ++i)
    sum += dot_k4<true>(&w[i].d, w[i].scales, w[i].qh, w[i].qs, a[i]);
  return sum;
}

// Q6_K: x = d sc_s (q - 32) over 16 sub-blocks of 16, q = 4 bits of ql | 2 bits of qh << 4.
AKV_QDOT_TARGET float dot_q6_k(const void* w_row, const void* act_row, std::int64_t nb) {
  const auto* w = static_cast<const quant::BlockQ6_K*>(w_row);
  const auto* a = static_cast<const ActBlock256*>(act_row);
  const __m256i low4 = _mm256_set1_epi8(0x0f), low2 = _mm256_set1_epi8(0x03);
  float sum = 0.0f;
  for (std::int64_t i = 0; i < nb; ++i) {
    const quant::BlockQ6_K& b = w[i];
    __m256i acc = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const __m256i ql0 = load256(b.ql + 64 * half), ql1 = load256(b.ql + 64 * half + 32);
      const __m256i qh = load256(b.qh + 32 * half);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, low4),
                          _mm256_slli_epi16(_mm256_and_si256(qh, low2), 4)),
          _mm256_or_si256(_mm256_and_si256(ql1, low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), low2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), low2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), low2), 4)),
      };
      for (int j = 0; j < 4; ++j) {
        const int s = 8 * half + 2 * j;  // sub-blocks s (low 16 bytes) and s + 1 (high 16)
        const __m256i scale =
            _mm256_set_m128i(_mm_set1_epi16(b.scales[s + 1]), _mm_set1_epi16(b.scales[s]));
        acc = dot_us8_scaled(acc, q[j], load256(a[i].qs + 128 * half + 32 * j), scale);
      }
    }
    int offset = 0;
    for (int s = 0; s < 16; ++s) offset += b.scales[s] * a[i].bsums[s];
    sum += h2f(b.d) * a[i].d * static_cast<float>(hsum_epi32(acc) - 32 * offset);
  }
  return sum;
}

QuantDotFn find_kernel(DType w) {
  switch (w) {
    case DType::Q8_0:
      return dot_q8_0;
    case DType::Q4_0:
      return dot_q4_0;
    case DType::Q5_0:
      return dot_q5_0;
    case DType::Q4_K:
      return dot_q4_k;
    case DType::Q5_K:
      return dot_q5_k;
    case DType::Q6_K:
      return dot_q6_k;
    default:
      return nullptr;
  }
}
