// The bodies of the repacked Q5_0 / Q8_0 / Q4_K kernels (quant_repack.h), compiled twice like
// quant_dot_simd.h (included after it, in the same namespace): AKV_QDOT_VNNI 1 uses dpbusd,
// 0 maddubs + madd. One group of 8 rows at a time, output lane r = row r: each 4-value group
// of the input is broadcast and multiplied with the same 4 columns of the 8 rows.
// Integer sums are exact: Q5_0 values 0..31 (maddubs pairs |.| <= 2 * 31 * 127, two vectors'
// pairs summed in int16 <= 15748 ... 31496), Q8_0 as u8 = w + 128 under dpbusd (no int16
// step) or |w| <= 128 by the sign trick under maddubs.

// The input's 4 bytes at p in every 32-bit lane.
AKV_QDOT_TARGET inline __m256i bcast4(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// The 8 f16 scales of a block of the group times the input block's scale.
AKV_QDOT_TARGET inline __m256 group_scales(const std::uint8_t* d, const ActBlock32& a) {
  return _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d))),
                       _mm256_set1_ps(a.d));
}

// Byte (4 r + j) = 16 where bit q of the fifth-bit plane's byte is set, else 0: bit q moved to
// bit 4 (16-bit shifts by at most 4 keep bit 4 of each byte inside that byte), then masked.
template <int kQuad>
AKV_QDOT_TARGET inline __m256i fifth_bits(__m256i plane) {
  if constexpr (kQuad < 4)
    return _mm256_slli_epi16(plane, 4 - kQuad);
  else if constexpr (kQuad > 4)
    return _mm256_srli_epi16(plane, kQuad - 4);
  else
    return plane;
}

// q | the fifth bits of quad kQuad (AVX-512: one ternary-logic op, q | (h & 16)).
template <int kQuad>
AKV_QDOT_TARGET inline __m256i with_fifth(__m256i q, __m256i plane) {
  const __m256i sixteen = _mm256_set1_epi8(16);
#if AKV_QDOT_VNNI
  return _mm256_ternarylogic_epi32(q, fifth_bits<kQuad>(plane), sixteen, 0xf8);
#else
  return _mm256_or_si256(q, _mm256_and_si256(fifth_bits<kQuad>(plane), sixteen));
#endif
}

// Q5_0: x = d (q - 16), q = nibble | fifth bit << 4. The integer sums start at -16 sum x
// (exact) and take sum q x; one FMA per block for the 8 rows.
template <int kV>
AKV_QDOT_TARGET inline void q5_0_vector(const std::uint8_t* qs, __m256i plane, const ActBlock32& a,
                                        __m256i& lo_acc, __m256i& hi_acc) {
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i x = load256(qs + 32 * kV);
  const __m256i lo = with_fifth<kV>(_mm256_and_si256(x, low4), plane);
  const __m256i hi = with_fifth<kV + 4>(_mm256_and_si256(_mm256_srli_epi16(x, 4), low4), plane);
#if AKV_QDOT_VNNI
  lo_acc = _mm256_dpbusd_epi32(lo_acc, lo, bcast4(a.qs + 4 * kV));
  hi_acc = _mm256_dpbusd_epi32(hi_acc, hi, bcast4(a.qs + 16 + 4 * kV));
#else
  // lo_acc / hi_acc hold int16 pair sums here (two vectors' worth at most, see the top).
  lo_acc = _mm256_add_epi16(lo_acc, _mm256_maddubs_epi16(lo, bcast4(a.qs + 4 * kV)));
  hi_acc = _mm256_add_epi16(hi_acc, _mm256_maddubs_epi16(hi, bcast4(a.qs + 16 + 4 * kV)));
#endif
}

AKV_QDOT_TARGET inline __m256 group_block_q5_0(const std::uint8_t* blk, const ActBlock32& a,
                                               __m256 acc) {
  const __m256i plane = load256(blk + 16);
  const std::uint8_t* qs = blk + 48;
  __m256i dot;
#if AKV_QDOT_VNNI
  __m256i lo = _mm256_set1_epi32(-16 * a.sum), hi = _mm256_setzero_si256();
  q5_0_vector<0>(qs, plane, a, lo, hi);
  q5_0_vector<1>(qs, plane, a, lo, hi);
  q5_0_vector<2>(qs, plane, a, lo, hi);
  q5_0_vector<3>(qs, plane, a, lo, hi);
  dot = _mm256_add_epi32(lo, hi);
#else
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i lo0 = _mm256_setzero_si256(), hi0 = lo0, lo1 = lo0, hi1 = lo0;
  q5_0_vector<0>(qs, plane, a, lo0, hi0);
  q5_0_vector<1>(qs, plane, a, lo0, hi0);
  q5_0_vector<2>(qs, plane, a, lo1, hi1);
  q5_0_vector<3>(qs, plane, a, lo1, hi1);
  dot = _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(lo0, hi0), ones),
                         _mm256_madd_epi16(_mm256_add_epi16(lo1, hi1), ones));
  dot = _mm256_add_epi32(dot, _mm256_set1_epi32(-16 * a.sum));
#endif
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), group_scales(blk, a), acc);
}

// Q8_0: x = d w, w int8.
AKV_QDOT_TARGET inline __m256 group_block_q8_0(const std::uint8_t* blk, const ActBlock32& a,
                                               __m256 acc) {
  const std::uint8_t* qs = blk + 16;
#if AKV_QDOT_VNNI
  // u = w + 128 as u8 (w xor 0x80): sum w x = sum u x - 128 sum x.
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256i even = _mm256_set1_epi32(-128 * a.sum), odd = _mm256_setzero_si256();
#pragma GCC unroll 4
  for (int q = 0; q < 8; q += 2) {
    even = _mm256_dpbusd_epi32(even, _mm256_xor_si256(load256(qs + 32 * q), flip),
                               bcast4(a.qs + 4 * q));
    odd = _mm256_dpbusd_epi32(odd, _mm256_xor_si256(load256(qs + 32 * q + 32), flip),
                              bcast4(a.qs + 4 * q + 4));
  }
  const __m256i dot = _mm256_add_epi32(even, odd);
#else
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i even = _mm256_setzero_si256(), odd = even;
#pragma GCC unroll 4
  for (int q = 0; q < 8; q += 2) {
    const __m256i w0 = load256(qs + 32 * q), w1 = load256(qs + 32 * q + 32);
    even = _mm256_add_epi32(
        even, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w0, w0),
                                                     _mm256_sign_epi8(bcast4(a.qs + 4 * q), w0)),
                                ones));
    odd = _mm256_add_epi32(
        odd, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w1, w1),
                                                    _mm256_sign_epi8(bcast4(a.qs + 4 * q + 4), w1)),
                               ones));
  }
  const __m256i dot = _mm256_add_epi32(even, odd);
#endif
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), group_scales(blk, a), acc);
}

// Int32 lane r = byte kByte of lane r (kPair: that byte in both int16 halves, for madd).
template <int kByte, bool kPair>
AKV_QDOT_TARGET inline __m256i lane_byte(__m256i v) {
  constexpr char z = -1, b0 = kByte, b1 = 4 + kByte, b2 = 8 + kByte, b3 = 12 + kByte;
  constexpr char p0 = kPair ? b0 : z, p1 = kPair ? b1 : z, p2 = kPair ? b2 : z, p3 = kPair ? b3 : z;
  return _mm256_shuffle_epi8(
      v, _mm256_setr_epi8(b0, z, p0, z, b1, z, p1, z, b2, z, p2, z, b3, z, p3, z, b0, z, p0, z, b1,
                          z, p1, z, b2, z, p2, z, b3, z, p3, z));
}

// Int32 lane r = bytes kByte and kByte + 1 of lane r as two int16 (the mins of two sub-blocks).
template <int kByte>
AKV_QDOT_TARGET inline __m256i lane_byte_pair(__m256i v) {
  constexpr char z = -1, a = kByte, b = kByte + 1;
  return _mm256_shuffle_epi8(v, _mm256_setr_epi8(a, z, b, z, 4 + a, z, 4 + b, z, 8 + a, z, 8 + b, z,
                                                 12 + a, z, 12 + b, z, a, z, b, z, 4 + a, z, 4 + b,
                                                 z, 8 + a, z, 8 + b, z, 12 + a, z, 12 + b, z));
}

// One chunk c of Q4_K's nibbles for the 8 rows: sub-blocks 2c (low nibbles) and 2c + 1 (high),
// each row's 32 products summed as integers and scaled by its 6-bit scale (lanes of sc, byte
// kC % 2 * 2 and + 1 of the plane), added to dot. VNNI: 8 dpbusd a sub-block, then one 32-bit
// multiply; else maddubs pairs summed in int16 (16 products of <= 15 * 127: < 2^15), then one
// madd with the scale in both halves.
template <int kC>
AKV_QDOT_TARGET inline __m256i q4_k_chunk(const std::uint8_t* qs, const ActBlock256& a, __m256i sc,
                                          __m256i dot) {
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  constexpr int kEven = 2 * kC % 4, kOdd = kEven + 1;
  __m256i even = _mm256_setzero_si256(), odd = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int q = 0; q < 8; ++q) {
    const __m256i x = load256(qs + 32 * (8 * kC + q));
    const __m256i lo = _mm256_and_si256(x, low4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), low4);
#if AKV_QDOT_VNNI
    even = _mm256_dpbusd_epi32(even, lo, bcast4(a.qs + 64 * kC + 4 * q));
    odd = _mm256_dpbusd_epi32(odd, hi, bcast4(a.qs + 64 * kC + 32 + 4 * q));
#else
    even = _mm256_add_epi16(even, _mm256_maddubs_epi16(lo, bcast4(a.qs + 64 * kC + 4 * q)));
    odd = _mm256_add_epi16(odd, _mm256_maddubs_epi16(hi, bcast4(a.qs + 64 * kC + 32 + 4 * q)));
#endif
  }
#if AKV_QDOT_VNNI
  dot = _mm256_add_epi32(dot, _mm256_mullo_epi32(even, lane_byte<kEven, false>(sc)));
  return _mm256_add_epi32(dot, _mm256_mullo_epi32(odd, lane_byte<kOdd, false>(sc)));
#else
  dot = _mm256_add_epi32(dot, _mm256_madd_epi16(even, lane_byte<kEven, true>(sc)));
  return _mm256_add_epi32(dot, _mm256_madd_epi16(odd, lane_byte<kOdd, true>(sc)));
#endif
}

// Q4_K: x = d sc_s q - dmin m_s over 8 sub-blocks of 32 (quant_dot_simd.h's block_k4 for 8
// rows at once). The three scale planes give the 6-bit scales and mins of all 8 rows in a few
// vector ops (the scalar unpacking of k_scales_mins, lane-wise); the mins term sum_s m_s (the
// input sum of sub-block s) is 4 madds; one FMA each for the products and the mins.
AKV_QDOT_TARGET inline __m256 group_block_q4_k(const std::uint8_t* blk, const ActBlock256& a,
                                               __m256 acc) {
  const __m256i low6 = _mm256_set1_epi8(0x3f), low4 = _mm256_set1_epi8(0x0f),
                low2 = _mm256_set1_epi8(0x03);
  const __m256i w0 = load256(blk + 32), w1 = load256(blk + 64), w2 = load256(blk + 96);
  // Byte s of lane r: row r's scale (mins) of sub-block s (lo) and 4 + s (hi).
  const __m256i sc_lo = _mm256_and_si256(w0, low6);
  const __m256i sc_hi =
      _mm256_or_si256(_mm256_and_si256(w2, low4),
                      _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w0, 6), low2), 4));
  const __m256i m_lo = _mm256_and_si256(w1, low6);
  const __m256i m_hi =
      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), low4),
                      _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w1, 6), low2), 4));
  const std::uint8_t* qs = blk + 128;
  __m256i dot = _mm256_setzero_si256();
  dot = q4_k_chunk<0>(qs, a, sc_lo, dot);
  dot = q4_k_chunk<1>(qs, a, sc_lo, dot);
  dot = q4_k_chunk<2>(qs, a, sc_hi, dot);
  dot = q4_k_chunk<3>(qs, a, sc_hi, dot);
  // Sub-block s's input sum (bsums[2 s] + bsums[2 s + 1], int16), pairs (2 k, 2 k + 1) in
  // every lane, against the same pairs of mins.
  const __m256i sub = _mm256_broadcastsi128_si256(
      _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.bsums)),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.bsums + 8))));
  __m256i mins = _mm256_madd_epi16(lane_byte_pair<0>(m_lo), _mm256_shuffle_epi32(sub, 0x00));
  mins = _mm256_add_epi32(
      mins, _mm256_madd_epi16(lane_byte_pair<2>(m_lo), _mm256_shuffle_epi32(sub, 0x55)));
  mins = _mm256_add_epi32(
      mins, _mm256_madd_epi16(lane_byte_pair<0>(m_hi), _mm256_shuffle_epi32(sub, 0xaa)));
  mins = _mm256_add_epi32(
      mins, _mm256_madd_epi16(lane_byte_pair<2>(m_hi), _mm256_shuffle_epi32(sub, 0xff)));
  const __m256 ad = _mm256_set1_ps(a.d);
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
  const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16)));
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, ad), acc);
  return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_mul_ps(dmin, ad), acc);
}

// quant_repack.h's kernel form; blocks on two f32 accumulators (even, odd).
template <typename Act, std::size_t kBlockBytes,
          __m256 (*kBlock)(const std::uint8_t*, const Act&, __m256)>
AKV_QDOT_TARGET void dot_groups(const void* w, std::int64_t nb, const void* act_row,
                                std::int64_t n_groups, float* out) {
  const auto* g = static_cast<const std::uint8_t*>(w);
  const auto* a = static_cast<const Act*>(act_row);
  constexpr std::size_t kGroupBlock = kRepackRows * kBlockBytes;
  for (std::int64_t i = 0; i < n_groups; ++i, g += kGroupBlock * static_cast<std::size_t>(nb)) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    std::int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
      acc0 = kBlock(g + kGroupBlock * static_cast<std::size_t>(b), a[b], acc0);
      acc1 = kBlock(g + kGroupBlock * static_cast<std::size_t>(b + 1), a[b + 1], acc1);
    }
    if (b < nb) acc0 = kBlock(g + kGroupBlock * static_cast<std::size_t>(b), a[b], acc0);
    _mm256_storeu_ps(out + kRepackRows * i, _mm256_add_ps(acc0, acc1));
  }
}

RepackedDotFn find_repacked_kernel(DType w) {
  switch (w) {
    case DType::Q5_0:
      return dot_groups<ActBlock32, sizeof(quant::BlockQ5_0), group_block_q5_0>;
    case DType::Q8_0:
      return dot_groups<ActBlock32, sizeof(quant::BlockQ8_0), group_block_q8_0>;
    case DType::Q4_K:
      return dot_groups<ActBlock256, sizeof(quant::BlockQ4_K), group_block_q4_k>;
    default:
      return nullptr;
  }
}
