// Decode of GGUF weight codes straight into the int8 A fragments of mma.sync (quant_mma.cu): for
// one 32-element group of a weight row staged in shared memory, the two words of four codes that
// lane t (= lane % 4) of an m16n8k32 (or two m16n8k16) fragment holds, and the group's scales.
// Not the GEMV's per-lane decode (quant_lane.cuh), which gives one lane a whole group.
#pragma once

#include "backend/cuda/quant_device.cuh"

namespace akv::cuda::quant {

// The scales of one group of a weight row: its dot with activation codes of scale (d, d * sum)
// is d * (lo * dot(elements 0..15) + hi * dot(elements 16..31)) - mn * d * sum.
struct alignas(16) GroupScales {
  float lo, hi, mn, unused;
};

// Which elements of a group lane t holds as its two words (w0, w1). The dot of a group does not
// depend on the order of its terms, so the A (weights) and B (activations) fragments may take
// the k index of the mma in any order as long as both take the same: kPaired types give lane t
// elements 8t..8t+7 (one 8-byte activation load), the others 4t..4t+3 and 16+4t..16+4t+3 (two
// 4-byte loads: Q4_0's nibble layout gives both words from one load; Q6_K's halves have their
// own scales and go through two k16 mmas, one a half). kWide types read a lane's bytes of a row
// with 8-byte loads: their stages must be 8-byte aligned (16-byte blocks, 16-byte aligned rows).
template <GgmlType T>
struct Fragment;

__device__ __forceinline__ uint2 ld_u64_aligned(const std::uint8_t* p) {
  return *reinterpret_cast<const uint2*>(p);
}

template <>
struct Fragment<GgmlType::Q8_0> {
  static constexpr bool kPaired = true, kWide = false, kHalves = false, kMins = false;
  // stage: 8 blocks of 34 bytes, group j = block j.
  static __device__ __forceinline__ void words(const std::uint8_t* stage, int j, int t, int& w0,
                                               int& w1) {
    const std::uint8_t* q = stage + j * 34 + 2 + 8 * t;
    w0 = static_cast<int>(ld_u32(q));
    w1 = static_cast<int>(ld_u32(q + 4));
  }
  static __device__ __forceinline__ GroupScales scales(const std::uint8_t* stage, int j) {
    const float d = f16_at(stage + j * 34);
    return {d, d, 0.0f, 0.0f};
  }
};

template <>
struct Fragment<GgmlType::Q4_0> {
  static constexpr bool kPaired = false, kWide = false, kHalves = false, kMins = false;
  // stage: 8 blocks of 18 bytes; element e < 16 is the low nibble of qs[e], 16 + e its high one.
  static __device__ __forceinline__ void words(const std::uint8_t* stage, int j, int t, int& w0,
                                               int& w1) {
    const std::uint32_t v = ld_u32(stage + j * 18 + 2 + 4 * t);
    w0 = static_cast<int>(__vsub4(v & 0x0f0f0f0fu, 0x08080808u));
    w1 = static_cast<int>(__vsub4((v >> 4) & 0x0f0f0f0fu, 0x08080808u));
  }
  static __device__ __forceinline__ GroupScales scales(const std::uint8_t* stage, int j) {
    const float d = f16_at(stage + j * 18);
    return {d, d, 0.0f, 0.0f};
  }
};

// Q4_K and Q5_K: the stage is one super-block, group j its sub-block j: elements are the low
// (even j) or high nibbles of 32 consecutive qs bytes (Q5_K: bit j of qh[e] the fifth bit).
template <>
struct Fragment<GgmlType::Q4_K> {
  static constexpr bool kPaired = true, kWide = true, kHalves = false, kMins = true;
  static __device__ __forceinline__ void words(const std::uint8_t* stage, int j, int t, int& w0,
                                               int& w1) {
    const uint2 qs = ld_u64_aligned(stage + 16 + (j / 2) * 32 + 8 * t);
    const int shift = 4 * (j % 2);
    w0 = static_cast<int>((qs.x >> shift) & 0x0f0f0f0fu);
    w1 = static_cast<int>((qs.y >> shift) & 0x0f0f0f0fu);
  }
  static __device__ __forceinline__ GroupScales scales(const std::uint8_t* stage, int j) {
    int sc = 0, m = 0;
    k_scale_min(stage + 4, j, sc, m);
    const float lo = __fmul_rn(f16_at(stage), static_cast<float>(sc));
    return {lo, lo, __fmul_rn(f16_at(stage + 2), static_cast<float>(m)), 0.0f};
  }
};

template <>
struct Fragment<GgmlType::Q5_K> {
  static constexpr bool kPaired = true, kWide = true, kHalves = false, kMins = true;
  static __device__ __forceinline__ void words(const std::uint8_t* stage, int j, int t, int& w0,
                                               int& w1) {
    const uint2 qs = ld_u64_aligned(stage + 48 + (j / 2) * 32 + 8 * t);
    const uint2 qh = ld_u64_aligned(stage + 16 + 8 * t);
    const int shift = 4 * (j % 2);
    w0 = static_cast<int>(((qs.x >> shift) & 0x0f0f0f0fu) | (((qh.x >> j) & 0x01010101u) << 4));
    w1 = static_cast<int>(((qs.y >> shift) & 0x0f0f0f0fu) | (((qh.y >> j) & 0x01010101u) << 4));
  }
  static __device__ __forceinline__ GroupScales scales(const std::uint8_t* stage, int j) {
    return Fragment<GgmlType::Q4_K>::scales(stage, j);  // same header layout
  }
};

// Q6_K: the stage is one super-block; group j (elements 32j..32j+31) takes ql's low (j % 4 < 2)
// or high nibbles of bytes 64 * (j / 4) + 32 * (j % 2) + e and bits 2 * (j % 4) of qh[32 * (j / 4)
// + e], minus 32; its halves have the int8 scales 2j and 2j + 1.
template <>
struct Fragment<GgmlType::Q6_K> {
  static constexpr bool kPaired = false, kWide = false, kHalves = true, kMins = false;
  static __device__ __forceinline__ int word(const std::uint8_t* stage, int j, int e) {
    const int half = j / 4;
    const std::uint32_t lo =
        (ld_u32(stage + half * 64 + 32 * (j % 2) + e) >> (4 * ((j % 4) / 2))) & 0x0f0f0f0fu;
    const std::uint32_t hi = ((ld_u32(stage + 128 + half * 32 + e) >> (2 * (j % 4))) & 0x03030303u)
                             << 4;
    return static_cast<int>(__vsub4(lo | hi, 0x20202020u));
  }
  static __device__ __forceinline__ void words(const std::uint8_t* stage, int j, int t, int& w0,
                                               int& w1) {
    w0 = word(stage, j, 4 * t);
    w1 = word(stage, j, 16 + 4 * t);
  }
  static __device__ __forceinline__ GroupScales scales(const std::uint8_t* stage, int j) {
    const float d = f16_at(stage + 208);
    return {__fmul_rn(d, static_cast<float>(static_cast<std::int8_t>(stage[192 + 2 * j]))),
            __fmul_rn(d, static_cast<float>(static_cast<std::int8_t>(stage[192 + 2 * j + 1]))),
            0.0f, 0.0f};
  }
};

}  // namespace akv::cuda::quant
