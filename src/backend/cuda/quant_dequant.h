// Whole quantized weights dequantized to bf16 on the device (quant_dequant.cu): the prefill path
// (more rows than the quantized GEMV takes) multiplies a dequantized scratch copy with the
// tensor-core GEMM. Also the embedding lookup of a quantized table.
#pragma once

#include "backend/cuda/quant_gemv.h"

namespace akv::cuda {

// dst [w.rows, w.cols] bf16, contiguous: every element the scalar oracle's f32 value
// (dequantize(), same operations in the same order, no fused multiply-add) rounded to nearest
// even bf16, so bit-exact with it.
void launch_dequantize_bf16(const QuantWeight& w, void* dst, CUstream_st* s);

// out[t, :] (f32, row stride out_stride) = scale * row ids[t] of `table`, t < n: the oracle's
// f32 values times scale (one rounding), as the reference backend's embed. ids in device memory.
void launch_embed_quantized(const QuantWeight& table, const std::int32_t* ids, std::int64_t n, float scale,
                            float* out, std::int64_t out_stride, CUstream_st* s);

}  // namespace akv::cuda
