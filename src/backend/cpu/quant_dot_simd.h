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

// acc + the dots of Q4_0 / Q5_0 blocks w0, w1 with their input pair (ActPair32), as 8 f32
// partial sums (lanes 0..3 block 0, 4..7 block 1). x = d (q - offset) with q unsigned: the
// low nibbles of both blocks (values 0..15) in one vector, the high ones (16..31) in another,
// the fifth bits (Q5_0) rearranged to match in scalar registers, and sum (q - offset) x =
// sum q x - offset sum x with the second term (exact) preloaded into the integer sums; one
// FMA scales both blocks.
template <int kOffset, typename Block>
AKV_QDOT_TARGET inline __m256 pair_q4_5(const Block& w0, const Block& w1, const ActPair32& a,
                                        __m256 acc) {
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i x = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(w1.qs),
                                        reinterpret_cast<const __m128i*>(w0.qs));
  __m256i lo = _mm256_and_si256(x, low4);
  __m256i hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), low4);
  if constexpr (kOffset == 16) {
    std::uint32_t h0, h1;
    std::memcpy(&h0, w0.qh, 4);
    std::memcpy(&h1, w1.qh, 4);
    const std::uint32_t bits_lo = (h0 & 0xffffu) | (h1 << 16);
    const std::uint32_t bits_hi = (h0 >> 16) | (h1 & 0xffff0000u);
#if AKV_QDOT_VNNI
    const __m256i sixteen = _mm256_set1_epi8(16);
    lo = _mm256_mask_add_epi8(lo, static_cast<__mmask32>(bits_lo), lo, sixteen);
    hi = _mm256_mask_add_epi8(hi, static_cast<__mmask32>(bits_hi), hi, sixteen);
#else
    lo = _mm256_or_si256(lo, high_bits32(bits_lo));
    hi = _mm256_or_si256(hi, high_bits32(bits_hi));
#endif
  }
  // -offset * sum x spread over a block's 4 lanes.
  __m256i p = _mm256_slli_epi32(load256(a.neg_sum), kOffset == 16 ? 2 : 1);
#if AKV_QDOT_VNNI
  p = _mm256_dpbusd_epi32(p, lo, load256(a.lo));
  p = _mm256_dpbusd_epi32(p, hi, load256(a.hi));
#else
  p = _mm256_add_epi32(p, _mm256_add_epi32(dot_us8(lo, load256(a.lo)), dot_us8(hi, load256(a.hi))));
#endif
  // The two f16 weight scales, each repeated over its block's 4 lanes.
  const __m128i d16 = _mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(w0.d | std::uint32_t{w1.d} << 16)),
                                       _mm_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3));
  const __m256 scale = _mm256_mul_ps(_mm256_cvtph_ps(d16), _mm256_loadu_ps(a.d));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc);
}

// Q4_0 / Q5_0 rows: block pairs on two accumulators. An odd row's last pair has a block 1 of
// zeros (scale 0), so its first weight block stands in for the missing second one.
template <int kOffset, typename Block>
AKV_QDOT_TARGET inline float dot_pairs(const void* w_row, const void* act_row, std::int64_t nb) {
  const auto* w = static_cast<const Block*>(w_row);
  const auto* a = static_cast<const ActPair32*>(act_row);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 3 < nb; i += 4) {
    acc0 = pair_q4_5<kOffset>(w[i], w[i + 1], a[i / 2], acc0);
    acc1 = pair_q4_5<kOffset>(w[i + 2], w[i + 3], a[i / 2 + 1], acc1);
  }
  if (i + 1 < nb) {
    acc0 = pair_q4_5<kOffset>(w[i], w[i + 1], a[i / 2], acc0);
    i += 2;
  }
  if (i < nb) acc1 = pair_q4_5<kOffset>(w[i], w[i], a[i / 2], acc1);
  return hsum_ps(_mm256_add_ps(acc0, acc1));
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

AKV_QDOT_TARGET inline float row_q8_0(const void* w_row, const void* act_row, std::int64_t nb) {
  return dot_blocks32<quant::BlockQ8_0, block_q8_0>(w_row, act_row, nb);
}

AKV_QDOT_TARGET inline float row_q4_0(const void* w_row, const void* act_row, std::int64_t nb) {
  return dot_pairs<8, quant::BlockQ4_0>(w_row, act_row, nb);
}

AKV_QDOT_TARGET inline float row_q5_0(const void* w_row, const void* act_row, std::int64_t nb) {
  return dot_pairs<16, quant::BlockQ5_0>(w_row, act_row, nb);
}

// The 8 six-bit scales (int16 lanes 0..7) and the 8 mins (lanes 8..15) of a Q4_K/Q5_K block
// (quant_blocks.h's 12-byte packing), unpacked four at a time in 32-bit words.
AKV_QDOT_TARGET inline __m256i k_scales_mins(const std::uint8_t* packed) {
  std::uint32_t u[3];
  std::memcpy(u, packed, 12);
  constexpr std::uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
  const std::uint32_t scales_lo = u[0] & low6, mins_lo = u[1] & low6;
  const std::uint32_t scales_hi = (u[2] & low4) | (((u[0] >> 6) & low2) << 4);
  const std::uint32_t mins_hi = ((u[2] >> 4) & low4) | (((u[1] >> 6) & low2) << 4);
  return _mm256_cvtepu8_epi16(_mm_setr_epi32(static_cast<int>(scales_lo),
                                             static_cast<int>(scales_hi), static_cast<int>(mins_lo),
                                             static_cast<int>(mins_hi)));
}

// Broadcasts int16 lane s (0..7) of each 128-bit half over that half.
AKV_QDOT_TARGET inline __m256i k_scale_of(__m256i scales, int s) {
  const char lo = static_cast<char>(2 * s), hi = static_cast<char>(2 * s + 1);
  return _mm256_shuffle_epi8(
      scales, _mm256_setr_epi8(lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo,
                               hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi));
}

// Q4_K (kHighBit false) and Q5_K: x = d sc_s q - dmin m_s over 8 sub-blocks of 32; chunk c of
// 32 bytes holds sub-block 2c in its low nibbles and 2c + 1 in its high ones. acc + the block's
// dot as 8 f32 partial sums: the scaled products and the mins term (sum_s m_s times the input
// sum of sub-block s, from bsums) each as integers, then one FMA each. The even and the odd
// sub-blocks sum into two integer chains, so the multiply-adds do not all wait on each other.
template <bool kHighBit>
AKV_QDOT_TARGET inline __m256 block_k4(const std::uint16_t* dd, const std::uint8_t* packed,
                                       const std::uint8_t* qh, const std::uint8_t* qs,
                                       const ActBlock256& a, __m256 acc) {
  const __m256i scales_mins = k_scales_mins(packed);
  const __m256i scales = _mm256_permute2x128_si256(scales_mins, scales_mins, 0x00);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i bits = kHighBit ? load256(qh) : _mm256_setzero_si256();
  __m256i dot_even = _mm256_setzero_si256(), dot_odd = _mm256_setzero_si256();
#pragma GCC unroll 4  // constant shuffle controls
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
    dot_even = dot_us8_scaled(dot_even, lo, load256(a.qs + 64 * c), k_scale_of(scales, 2 * c));
    dot_odd =
        dot_us8_scaled(dot_odd, hi, load256(a.qs + 64 * c + 32), k_scale_of(scales, 2 * c + 1));
  }
  // Sub-block s's input sum, bsums[2 s] + bsums[2 s + 1] (|.| <= 32 * 127: int16), times m_s.
  const __m128i sub_sums = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.bsums)),
                                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.bsums + 8)));
  const __m128i mins = _mm_madd_epi16(_mm256_extracti128_si256(scales_mins, 1), sub_sums);
  const __m256i dot = _mm256_add_epi32(dot_even, dot_odd);
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(h2f(dd[0]) * a.d), acc);
  return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_zextsi128_si256(mins)),
                          _mm256_set1_ps(h2f(dd[1]) * a.d), acc);
}

AKV_QDOT_TARGET inline float row_q4_k(const void* w_row, const void* act_row, std::int64_t nb) {
  const auto* w = static_cast<const quant::BlockQ4_K*>(w_row);
  const auto* a = static_cast<const ActBlock256*>(act_row);
  __m256 acc = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < nb; ++i) acc = block_k4<false>(&w[i].d, w[i].scales, nullptr, w[i].qs, a[i], acc);
  return hsum_ps(acc);
}

AKV_QDOT_TARGET inline float row_q5_k(const void* w_row, const void* act_row, std::int64_t nb) {
  const auto* w = static_cast<const quant::BlockQ5_K*>(w_row);
  const auto* a = static_cast<const ActBlock256*>(act_row);
  __m256 acc = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < nb; ++i) acc = block_k4<true>(&w[i].d, w[i].scales, w[i].qh, w[i].qs, a[i], acc);
  return hsum_ps(acc);
}

// Q6_K: x = d sc_s (q - 32) over 16 sub-blocks of 16, q = 4 bits of ql | 2 bits of qh << 4.
// Per block: the products scaled per sub-block (scales unpacked once, each pair of them picked
// by one constant shuffle) in two integer chains, the offset 32 sum_s sc_s (input sum of s)
// subtracted as a vector, one FMA into the row's f32 sums.
AKV_QDOT_TARGET inline float row_q6_k(const void* w_row, const void* act_row, std::int64_t nb) {
  const auto* w = static_cast<const quant::BlockQ6_K*>(w_row);
  const auto* a = static_cast<const ActBlock256*>(act_row);
  const __m256i low4 = _mm256_set1_epi8(0x0f), low2 = _mm256_set1_epi8(0x03);
  __m256 sum = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < nb; ++i) {
    const quant::BlockQ6_K& b = w[i];
    const __m256i scales =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 2  // constant shuffle controls
    for (int half = 0; half < 2; ++half) {
      // Scales 8 half .. 8 half + 7 as int16 in both 128-bit halves.
      const __m256i sc = half == 0 ? _mm256_permute2x128_si256(scales, scales, 0x00)
                                   : _mm256_permute2x128_si256(scales, scales, 0x11);
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
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        // Sub-blocks 8 half + 2 j (low 16 bytes) and 8 half + 2 j + 1 (high 16).
        const char lo0 = static_cast<char>(4 * j), lo1 = static_cast<char>(4 * j + 1);
        const char hi0 = static_cast<char>(4 * j + 2), hi1 = static_cast<char>(4 * j + 3);
        const __m256i scale = _mm256_shuffle_epi8(
            sc, _mm256_setr_epi8(lo0, lo1, lo0, lo1, lo0, lo1, lo0, lo1, lo0, lo1, lo0, lo1, lo0,
                                 lo1, lo0, lo1, hi0, hi1, hi0, hi1, hi0, hi1, hi0, hi1, hi0, hi1,
                                 hi0, hi1, hi0, hi1, hi0, hi1));
        acc[j % 2] =
            dot_us8_scaled(acc[j % 2], q[j], load256(a[i].qs + 128 * half + 32 * j), scale);
      }
    }
    // 32 sum_s sc_s bsums_s (|.| < 2^25), spread over 8 lanes.
    const __m256i offset = _mm256_slli_epi32(
        _mm256_madd_epi16(scales, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].bsums))),
        5);
    const __m256i dot = _mm256_sub_epi32(_mm256_add_epi32(acc[0], acc[1]), offset);
    sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(h2f(b.d) * a[i].d), sum);
  }
  return hsum_ps(sum);
}

// quant_dot.h's kernel form: n_rows consecutive weight rows against one input row, the row
// kernel inlined (short rows, e.g. 576 columns, would otherwise pay a call and the set-up of
// its constants per row).
template <float (*kRow)(const void*, const void*, std::int64_t)>
AKV_QDOT_TARGET void dot_rows(const void* w, std::size_t w_row_bytes, std::int64_t nb,
                              const void* act_row, std::int64_t n_rows, float* out) {
  const auto* row = static_cast<const std::uint8_t*>(w);
  for (std::int64_t j = 0; j < n_rows; ++j, row += w_row_bytes) out[j] = kRow(row, act_row, nb);
}

// quant_dot.h's block quantization (n a multiple of 32), equal bit for bit to the scalar form:
// the same max, d = max / 127 and 1 / d, x / d clamped to [-127, 127] and rounded to nearest
// even (cvtps under the default rounding mode, as lrint).
AKV_QDOT_TARGET float quantize_block(const float* x, int n, std::int8_t* qs) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 amax = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float d = _mm_cvtss_f32(m) / 127.0f;
  const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int i = 0; i < n; i += 32) {
    __m256i q[4];
    for (int j = 0; j < 4; ++j)
      q[j] = _mm256_cvtps_epi32(
          _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * j), id), lo), hi));
    // The packs interleave 4-value groups across the two 128-bit lanes; the permute restores order.
    const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + i), _mm256_permutevar8x32_epi32(b, order));
  }
  return d;
}

QuantDotFn find_kernel(DType w) {
  switch (w) {
    case DType::Q8_0:
      return dot_rows<row_q8_0>;
    case DType::Q4_0:
      return dot_rows<row_q4_0>;
    case DType::Q5_0:
      return dot_rows<row_q5_0>;
    case DType::Q4_K:
      return dot_rows<row_q4_k>;
    case DType::Q5_K:
      return dot_rows<row_q5_k>;
    case DType::Q6_K:
      return dot_rows<row_q6_k>;
    default:
      return nullptr;
  }
}
