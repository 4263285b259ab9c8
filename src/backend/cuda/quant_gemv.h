// Matmuls that read GGUF-quantized weights straight from their raw blocks (quant_gemv.cu):
// y[n, rows] = x[n, cols] . W^T for n <= kQuantGemvMaxRows, x and y f32 (the CUDA backend's
// activations). x is first quantized to int8 per 32 columns (launch_quantize_activations); the
// GEMV multiplies those codes with the weight codes four at a time (dp4a) and applies both
// scales in f32. The tensor-core kernel below (quant_mma.cu) computes the same product for more
// activation rows; larger matmuls go through dequantize + GEMM (quant_dequant.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/gguf_types.h"

struct CUstream_st;

namespace akv::cuda {

inline constexpr int kQuantGemvMaxRows = 64;  // most activation rows one GEMV launch takes
inline constexpr int kQuantGroup = 32;        // columns per activation scale

// How the GEMV spreads one activation row's work (more rows: always WarpRows). WarpRows: each warp
// two weight rows, all their 1,024-column stages in turn. BlockStages: the four warps of a block
// share two rows, each taking every fourth stage, so a long row has four warps' bytes in flight,
// not one's. Auto: BlockStages for rows of kQuantGemvSplitRowBytes or more. Measured on an H100
// (docs/perf/cuda.md): BlockStages reads Q4_K's and Q6_K's down_proj rows (8-12 KB) at 1.3-1.4x,
// every Q8_0 matrix (4.3 KB rows and up) at 1.07x, and loses ~10% on 2.3-3.4 KB rows.
enum class QuantGemvForm { Auto, WarpRows, BlockStages };
inline constexpr std::int64_t kQuantGemvSplitRowBytes = 4096;

// A quantized weight in device memory: row r's blocks start at data + r * row_bytes (row_bytes =
// cols / block_elems * block_bytes), rows back to back as in the GGUF file. `data` is 16-byte
// aligned and readable up to the next 16-byte boundary past the last row (alloc rounds up).
struct QuantWeight {
  const void* data = nullptr;
  GgmlType type = GgmlType::Q8_0;
  std::int64_t rows = 0, cols = 0;
};

// Types the GEMV and the dequantizer take.
bool quant_kernels_support(GgmlType t);
// Bytes of one row of `t` with `cols` columns (cols a whole number of blocks: AKV_CHECK).
std::int64_t quant_row_bytes(GgmlType t, std::int64_t cols);

// x quantized per group of kQuantGroup columns: codes [n, cols] int8 (contiguous) and per group
// (d, d * sum of its codes) as float2, [n, cols / kQuantGroup]. The rule, which the parity
// tests replay on the host: amax = max |x| of the group, d = amax / 127 (f32),
// q = amax == 0 ? 0 : round_half_even(x / d) (IEEE division).
struct QuantActivations {
  std::int8_t* codes = nullptr;
  float* scales = nullptr;  // float2 pairs
};
// Device bytes a QuantActivations of [n, cols] needs (codes, then scales, 16-byte aligned).
std::size_t quant_activation_bytes(std::int64_t n, std::int64_t cols);
// Carves a QuantActivations of [n, cols] out of `scratch` (quant_activation_bytes of it).
QuantActivations quant_activations_in(void* scratch, std::int64_t n, std::int64_t cols);

// x [n, cols] f32 with row stride x_stride (elements) -> a; cols % kQuantGroup == 0.
void launch_quantize_activations(const float* x, std::int64_t x_stride, std::int64_t n, std::int64_t cols,
                                 QuantActivations a, CUstream_st* s);

// y[n, w.rows] (row stride y_stride elements, f32) = a . w^T where a holds n <= kQuantGemvMaxRows
// quantized rows of width w.cols. f32 accumulation; the result equals the exact product of the
// oracle-dequantized weights with the dequantized activations up to f32 rounding.
void launch_quant_gemv(const QuantWeight& w, QuantActivations a, std::int64_t n, float* y, std::int64_t y_stride,
                       CUstream_st* s, QuantGemvForm form = QuantGemvForm::Auto);

// One weight of a multi-target launch and where its product goes.
struct QuantTarget {
  QuantWeight w;
  float* y = nullptr;
  std::int64_t y_stride = 0;
};
inline constexpr int kQuantGemvMaxTargets = 3;  // q/k/v: one launch
// launch_quant_gemv for up to kQuantGemvMaxTargets weights of one type and width in one launch
// (each target's rows a run of the grid's blocks): small matrices such as k and v no longer pay a
// kernel each.
void launch_quant_gemv_multi(const QuantTarget* targets, int n_targets, QuantActivations a, std::int64_t n,
                             CUstream_st* s, QuantGemvForm form = QuantGemvForm::Auto);

// launch_quant_gemv_multi for targets of two types in one launch, so a small matrix of the other
// type (v in Q6_K next to q/k in Q4_K: the llama-quantize _M mixes) pays no launch and tail of its
// own: targets[0, n_first) of one type, the rest of another, one width, n <= 4 rows. Each block
// runs exactly the single-type kernel's work for its rows: results equal to one launch per type.
// quant_gemv_mixes: the pairs (Q4_K or Q5_K, then Q6_K) and shapes it takes (one row: both types'
// rows under kQuantGemvSplitRowBytes, so both would take WarpRows).
inline constexpr int kQuantGemvMixedMaxRows = 4;
bool quant_gemv_mixes(GgmlType first, GgmlType second, std::int64_t cols, std::int64_t n);
void launch_quant_gemv_mixed(const QuantTarget* targets, int n_targets, int n_first,
                             QuantActivations a, std::int64_t n, CUstream_st* s);

// The same product on the tensor cores (quant_mma.cu), for the activation rows where the GEMV's
// per-row dp4a work dominates: 16 weight rows at a time decoded from the blocks into the int8 A
// operand of mma.sync (m16n8k32; Q6_K, whose scales cover 16 elements, two m16n8k16), 8
// activation rows at a time as B, int32 dots per 32-column group, both scales applied in f32.
// Its activations are the codes and scales of the rule above laid out group-major, so that the
// 8 rows of a fragment are one contiguous run: codes [cols / 32][n8][32] int8 and scales
// [cols / 32][n8] float2 (d, d * sum), n8 = n rounded up to 8, rows n..n8-1 zero.
inline constexpr int kQuantMmaMaxRows = 64;
bool quant_mma_supports(GgmlType t);
std::size_t quant_mma_activation_bytes(std::int64_t n, std::int64_t cols);
QuantActivations quant_mma_activations_in(void* scratch, std::int64_t n, std::int64_t cols);
void launch_quantize_mma_activations(const float* x, std::int64_t x_stride, std::int64_t n,
                                     std::int64_t cols, QuantActivations a, CUstream_st* s);
// launch_quant_gemv_multi's contract and result (up to f32 rounding) for n <= kQuantMmaMaxRows,
// the types quant_mma_supports, and `a` from launch_quantize_mma_activations.
void launch_quant_mma_multi(const QuantTarget* targets, int n_targets, QuantActivations a,
                            std::int64_t n, CUstream_st* s);

}  // namespace akv::cuda
