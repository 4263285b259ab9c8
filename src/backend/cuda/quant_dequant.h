// Whole quantized weights dequantized to bf16 on the device (quant_dequant.cu): the prefill path
// (more rows than the quantized GEMV takes) multiplies a dequantized scratch copy with the
// tensor-core GEMM.
#pragma once

#include "backend/cuda/quant_gemv.h"

namespace akv::cuda {

// dst [w.rows, w.cols] bf16, contiguous: every element the scalar oracle's f32 value
// (dequantize(), same operations in the same order, no fused multiply-add) rounded to nearest
// even bf16, so bit-exact with it.
void launch_dequantize_bf16(const QuantWeight& w, void* dst, CUstream_st* s);

}  // namespace akv::cuda
