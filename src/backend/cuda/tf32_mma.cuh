// Warp-level tf32 tensor-core products (mma.sync m16n8k8, sm_80+) for f32 data in shared
// memory: operand fragments rounded to tf32, or split into two tf32 parts for near-f32 products
// (3xTF32: x = big + small; small*big + big*small + big*big, the dropped small*small ~2^-21 of
// a term). mma.sync reads a .tf32 operand's top 19 bits (the 13 low bits of the f32 are
// ignored). Used by the chunked delta rule's kernels.
#pragma once

#include <cstdint>

namespace akv::cuda {

// c[4] += a[4] (m16k8 A fragment) x (b0, b1) (k8n8 B fragment).
__device__ __forceinline__ void mma_tf32(float* c, const std::uint32_t* a, std::uint32_t b0,
                                         std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// x rounded to tf32 (to nearest, ties away from zero, as cvt.rna) with two integer operations:
// add half a tf32 ulp, clear the 13 low bits. Finite x only.
__device__ __forceinline__ std::uint32_t round_tf32(float x) {
  return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}

// An operand fragment of N f32 values as tf32: big (rounded) and, with kSplit, small (the exact
// f32 remainder, which the tensor cores read truncated to tf32: 2^-10 of it, ~2^-21 of x).
// Integer rounding instead of cvt.rna keeps the split off the conversion units.
template <int N, bool kSplit>
struct Tf32Frag {
  std::uint32_t big[N], small[kSplit ? N : 1];
  __device__ __forceinline__ void set(int i, float x) {
    big[i] = round_tf32(x);
    if constexpr (kSplit) small[i] = __float_as_uint(x - __uint_as_float(big[i]));
  }
};

template <bool kSplit>
__device__ __forceinline__ void mma_frag(float* c, const Tf32Frag<4, kSplit>& a,
                                         const Tf32Frag<2, kSplit>& b) {
  if constexpr (kSplit) {  // small terms first: they are the least significant
    mma_tf32(c, a.small, b.big[0], b.big[1]);
    mma_tf32(c, a.big, b.small[0], b.small[1]);
  }
  mma_tf32(c, a.big, b.big[0], b.big[1]);
}

// Lane roles in a fragment: g = lane / 4 (A/C rows, B columns), t = lane % 4 (A columns, B rows).
// A (16 x 8) at m[row * ld + col], tile corner m: rows g, g + 8; columns t, t + 4.
template <bool kSplit>
__device__ __forceinline__ Tf32Frag<4, kSplit> load_a(const float* m, int ld, int g, int t) {
  Tf32Frag<4, kSplit> f;
  f.set(0, m[g * ld + t]);
  f.set(1, m[(g + 8) * ld + t]);
  f.set(2, m[g * ld + t + 4]);
  f.set(3, m[(g + 8) * ld + t + 4]);
  return f;
}
// A (16 x 8) stored transposed: A[row][col] = m[col * ld + row].
template <bool kSplit>
__device__ __forceinline__ Tf32Frag<4, kSplit> load_a_transposed(const float* m, int ld, int g,
                                                                 int t) {
  Tf32Frag<4, kSplit> f;
  f.set(0, m[t * ld + g]);
  f.set(1, m[t * ld + g + 8]);
  f.set(2, m[(t + 4) * ld + g]);
  f.set(3, m[(t + 4) * ld + g + 8]);
  return f;
}
// B (8 x 8) stored transposed: B[k][n] = m[n * ld + k] (rows of the right factor's transpose).
template <bool kSplit>
__device__ __forceinline__ Tf32Frag<2, kSplit> load_b_transposed(const float* m, int ld, int g,
                                                                 int t) {
  Tf32Frag<2, kSplit> f;
  f.set(0, m[g * ld + t]);
  f.set(1, m[g * ld + t + 4]);
  return f;
}
// B (8 x 8) at m[k * ld + n], row k scaled by scale[k] (nullptr: none): rows t, t + 4; column g.
template <bool kSplit>
__device__ __forceinline__ Tf32Frag<2, kSplit> load_b(const float* m, int ld, int g, int t,
                                                      const float* scale = nullptr) {
  Tf32Frag<2, kSplit> f;
  const float s0 = scale != nullptr ? scale[t] : 1.0f, s1 = scale != nullptr ? scale[t + 4] : 1.0f;
  f.set(0, s0 * m[t * ld + g]);
  f.set(1, s1 * m[(t + 4) * ld + g]);
  return f;
}

}  // namespace akv::cuda
