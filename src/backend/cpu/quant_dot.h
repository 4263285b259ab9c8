// Integer dot products of quantized weight rows (GGUF blocks, tensor/quant_blocks.h) with
// activations quantized to int8 per row, ggml's scheme: blocks of 32 for the 32-element
// types, blocks of 256 with per-16 sums for the k-quants. Internal to backend/cpu: the
// FastBackend quantizes each input row once per matmul and streams weight rows through these.
// A type without an integer kernel here is dequantized row by row instead (fast_backend.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/kernels.h"
#include "tensor/dtype.h"

namespace akv {

// 32 activations as d * qs[i]; sum = sum of qs (for the weight types with an offset).
struct ActBlock32 {
  float d;
  std::int32_t sum;
  std::int8_t qs[32];
};
// Two blocks of 32 activations (0 and 1), laid out for the Q4_0 / Q5_0 kernels, which hold
// the low nibbles (values 0..15) of both weight blocks in one 256-bit vector and the high
// nibbles (16..31) in another: lo = qs0[0, 16) then qs1[0, 16), hi = qs0[16, 32) then
// qs1[16, 32); neg_sum = -sum of block b's qs in lanes 4b..4b+3, d = block b's scale there.
// An odd row's last pair has a block 1 of zeros (d 0, qs 0, sum 0).
struct ActPair32 {
  std::int8_t lo[32];
  std::int8_t hi[32];
  std::int32_t neg_sum[8];
  float d[8];
};
// 256 activations as d * qs[i]; bsums[j] = sum of qs[16 j .. 16 j + 16).
struct ActBlock256 {
  float d;
  std::int16_t bsums[16];
  std::int8_t qs[256];
};

enum class ActFormat { None, Block32, Pair32, Block256 };

// The activation blocks w's integer kernel takes; None: no integer kernel for w.
ActFormat act_format(DType w);
// Bytes of one input row of `k` elements in `format` (k a whole number of 32 or 256 blocks).
std::size_t act_row_bytes(ActFormat format, std::int64_t k);
// Quantizes x[0, k) into `out` (act_row_bytes bytes): per block d = max|x| / 127,
// qs = round(x / d) to nearest even (0 for an all-zero block). The same bytes on every `isa`
// (Scalar: plain C++; AVX2 and AVX-512: the AVX2 form).
void quantize_act_row(Isa isa, ActFormat format, const float* x, std::int64_t k, void* out);

// out[j] = sum_i w_j[i] * x[i] for the n_rows weight rows w_j (of `n_blocks` blocks each,
// the first at w, w_row_bytes apart) against one quantized input row: per block, the weight
// block's scale(s) times the activation scale times an exact integer dot product. Each row's
// result depends on that row and the input only (not on n_rows).
using QuantDotFn = void (*)(const void* w, std::size_t w_row_bytes, std::int64_t n_blocks,
                            const void* act_row, std::int64_t n_rows, float* out);

// The integer kernel of weight type w on `isa` (AVX-512 uses VNNI instructions where the CPU
// has them), or null: Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K on AVX2 and AVX-512; none on Scalar.
QuantDotFn find_quant_dot(Isa isa, DType w);

// Per-ISA tables (quant_dot_avx2.cpp): the AVX2 kernels, and the same kernels built with
// AVX-512 VNNI dot-product instructions (256-bit, needs avx512vl + avx512vnni).
QuantDotFn find_quant_dot_avx2(DType w);
// quantize_act_row's block step (n a multiple of 32): qs[0, n) = round(x / d); returns d.
float quantize_block_avx2(const float* x, int n, std::int8_t* qs);
QuantDotFn find_quant_dot_vnni(DType w);
bool cpu_has_vnni();

}  // namespace akv
