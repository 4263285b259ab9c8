// One lane's decode of GGUF weight codes for the int8-activation kernels (the quantized GEMV,
// quant_gemv.cu, and the GGUF-block MoE decode, moe_decode_quant.cu): in a stage of 1,024
// elements of a row (32 groups of 32, whole blocks), lane l takes element group l as eight packed
// int8 words and the block scales that apply to them.
#pragma once

#include "backend/cuda/quant_device.cuh"

namespace akv::cuda::quant {

// One lane's 32 weights: codes q (int8 x 4 per word, element order), and the dot of the group
// with activations (d, d * sum) is d * (lo * dot(q[0..3]) + hi * dot(q[4..7])) - mn * d_sum.
struct LaneWeights {
  int q[8];
  float lo, hi, mn;
};

template <GgmlType T>
__device__ __forceinline__ LaneWeights decode(const std::uint8_t* stage, int lane);

template <>
__device__ __forceinline__ LaneWeights decode<GgmlType::Q8_0>(const std::uint8_t* stage, int lane) {
  const std::uint8_t* b = stage + lane * 34;
  LaneWeights w;
#pragma unroll
  for (int i = 0; i < 8; ++i) w.q[i] = static_cast<int>(ld_u32(b + 2 + 4 * i));
  w.lo = w.hi = f16_at(b);
  w.mn = 0.0f;
  return w;
}

template <>
__device__ __forceinline__ LaneWeights decode<GgmlType::Q4_0>(const std::uint8_t* stage, int lane) {
  const std::uint8_t* b = stage + lane * 18;
  LaneWeights w;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::uint32_t v = ld_u32(b + 2 + 4 * i);
    w.q[i] = static_cast<int>(__vsub4(v & 0x0f0f0f0fu, 0x08080808u));             // elements 4i..
    w.q[4 + i] = static_cast<int>(__vsub4((v >> 4) & 0x0f0f0f0fu, 0x08080808u));  // 16 + 4i..
  }
  w.lo = w.hi = f16_at(b);
  w.mn = 0.0f;
  return w;
}

// The doubled E2M1 values of four codes (0..15, one per byte) as four int8: codes 0..7 from the
// table, 8..15 their negations.
__device__ __forceinline__ int e2m1_doubled4(std::uint32_t nib) {
  constexpr std::uint32_t kT0 = 0x03020100u, kT1 = 0x0c080604u;
  const std::uint32_t sel =
      (nib & 7u) | ((nib >> 4) & 0x70u) | ((nib >> 8) & 0x700u) | ((nib >> 12) & 0x7000u);
  const std::uint32_t v = __byte_perm(kT0, kT1, sel);
  const std::uint32_t neg = ((nib >> 3) & 0x01010101u) * 0xffu;
  return static_cast<int>((v & ~neg) | (__vsub4(0u, v) & neg));
}

template <>
__device__ __forceinline__ LaneWeights decode<GgmlType::MXFP4>(const std::uint8_t* stage,
                                                               int lane) {
  const std::uint8_t* b = stage + lane * 17;
  LaneWeights w;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::uint32_t v = ld_u32(b + 1 + 4 * i);
    w.q[i] = e2m1_doubled4(v & 0x0f0f0f0fu);
    w.q[4 + i] = e2m1_doubled4((v >> 4) & 0x0f0f0f0fu);
  }
  w.lo = w.hi = e8m0_half(b[0]);
  w.mn = 0.0f;
  return w;
}

// Eight E2M1 codes, the nibbles of v in order (the first in bits 0-3), as their doubled values
// (e2m1_doubled4's): codes 0..3 in lo's bytes, 4..7 in hi's. Three byte permutes a four: the low
// three bits of a code pick from the positive and from the negative half of the table, its sign
// bit between the two (about a quarter of e2m1_doubled4's instructions).
__device__ __forceinline__ void e2m1_doubled8(std::uint32_t v, int& lo, int& hi) {
  constexpr std::uint32_t kPos0 = 0x03020100u, kPos1 = 0x0c080604u;  // 0, 1, 2, 3 | 4, 6, 8, 12
  constexpr std::uint32_t kNeg0 = 0xfdfeff00u, kNeg1 = 0xf4f8fafcu;  // negated, as int8
  const std::uint32_t idx = v & 0x77777777u;
  const std::uint32_t half = 0x32103210u | ((v & 0x88888888u) >> 1);  // byte n, or n + 4: negative
  lo = static_cast<int>(
      __byte_perm(__byte_perm(kPos0, kPos1, idx), __byte_perm(kNeg0, kNeg1, idx), half));
  hi = static_cast<int>(__byte_perm(__byte_perm(kPos0, kPos1, idx >> 16),
                                    __byte_perm(kNeg0, kNeg1, idx >> 16), half >> 16));
}

// A group of 32 MXFP4 values in the layout GPT-OSS releases (ExpertFormat::Mxfp4: 16 bytes with
// value 2k in the low nibble of byte k and 2k + 1 in its high nibble, so each word's nibbles are
// eight values in order; the E8M0 scale apart): the same LaneWeights as decode<MXFP4> of the
// GGUF block holding these values (codes in element order), so the dot products match bit for
// bit.
__device__ __forceinline__ LaneWeights decode_mxfp4_split(uint4 nibbles, std::uint8_t scale) {
  LaneWeights w;
  e2m1_doubled8(nibbles.x, w.q[0], w.q[1]);  // values 0 .. 7
  e2m1_doubled8(nibbles.y, w.q[2], w.q[3]);
  e2m1_doubled8(nibbles.z, w.q[4], w.q[5]);
  e2m1_doubled8(nibbles.w, w.q[6], w.q[7]);  // values 24 .. 31
  w.lo = w.hi = e8m0_half(scale);
  w.mn = 0.0f;
  return w;
}

// Q4_K and Q5_K: lane l takes sub-block l % 8 of super-block l / 8; its 32 elements are the
// low (even sub-block) or high nibbles of 32 consecutive qs bytes.
template <>
__device__ __forceinline__ LaneWeights decode<GgmlType::Q4_K>(const std::uint8_t* stage, int lane) {
  const int sub = lane % 8;
  const std::uint8_t* b = stage + (lane / 8) * 144;
  const std::uint8_t* qs = b + 16 + (sub / 2) * 32;
  LaneWeights w;
#pragma unroll
  for (int i = 0; i < 8; ++i)
    w.q[i] = static_cast<int>((ld_u32(qs + 4 * i) >> (4 * (sub % 2))) & 0x0f0f0f0fu);
  int sc = 0, m = 0;
  k_scale_min(b + 4, sub, sc, m);
  w.lo = w.hi = __fmul_rn(f16_at(b), static_cast<float>(sc));
  w.mn = __fmul_rn(f16_at(b + 2), static_cast<float>(m));
  return w;
}

template <>
__device__ __forceinline__ LaneWeights decode<GgmlType::Q5_K>(const std::uint8_t* stage, int lane) {
  const int sub = lane % 8;
  const std::uint8_t* b = stage + (lane / 8) * 176;
  const std::uint8_t* qh = b + 16;
  const std::uint8_t* qs = b + 48 + (sub / 2) * 32;
  LaneWeights w;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const std::uint32_t lo = (ld_u32(qs + 4 * i) >> (4 * (sub % 2))) & 0x0f0f0f0fu;
    const std::uint32_t hi = ((ld_u32(qh + 4 * i) >> sub) & 0x01010101u) << 4;
    w.q[i] = static_cast<int>(lo | hi);
  }
  int sc = 0, m = 0;
  k_scale_min(b + 4, sub, sc, m);
  w.lo = w.hi = __fmul_rn(f16_at(b), static_cast<float>(sc));
  w.mn = __fmul_rn(f16_at(b + 2), static_cast<float>(m));
  return w;
}

// Q6_K: lane l takes elements 32c..32c+31 (c = l % 8) of super-block l / 8: sub-blocks 2c, 2c+1.
template <>
__device__ __forceinline__ LaneWeights decode<GgmlType::Q6_K>(const std::uint8_t* stage, int lane) {
  const int c = lane % 8, half = c / 4;
  const std::uint8_t* b = stage + (lane / 8) * 210;
  const std::uint8_t* ql = b + half * 64 + 32 * (c % 2);
  const std::uint8_t* qh = b + 128 + half * 32;
  LaneWeights w;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const std::uint32_t lo = (ld_u32(ql + 4 * i) >> (4 * ((c % 4) / 2))) & 0x0f0f0f0fu;
    const std::uint32_t hi = ((ld_u32(qh + 4 * i) >> (2 * (c % 4))) & 0x03030303u) << 4;
    w.q[i] = static_cast<int>(__vsub4(lo | hi, 0x20202020u));
  }
  const float d = f16_at(b + 208);
  w.lo = __fmul_rn(d, static_cast<float>(static_cast<std::int8_t>(b[192 + 2 * c])));
  w.hi = __fmul_rn(d, static_cast<float>(static_cast<std::int8_t>(b[192 + 2 * c + 1])));
  w.mn = 0.0f;
  return w;
}

}  // namespace akv::cuda::quant
