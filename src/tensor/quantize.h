// Load-time quantization: f32 rows -> GGUF blocks (quant_blocks.h) of Q8_0, Q5_0, Q6_K or Q4_K,
// for `--quantize` of safetensors checkpoints. The inverse is the oracle (dequantize.h). Not a
// copy of llama-quantize's search: one pass per block with scales rounded up, so no value is
// clipped and every element is within half a quantization step of its input:
//   Q8_0: d = max|x| / 127, q = round(x / d)           (the format's reference rule, bit-exact)
//   Q5_0: d = max|x| / 15 (f16, rounded up), q - 16 = round(x / d)
//   Q6_K: per 16: s = max|x| / 31; d = max s / 127 (f16 up), sc = ceil(s / d), q - 32 = round(x /
//   (d sc)) Q4_K: per 32: m = max(0, -min x), s = (max x + m) / 15; 6-bit scales and mins under f16
//         super-scales (rounded up), q = round((x + dmin m_q) / (d s_q))
#pragma once

#include <cstdint>
#include <span>

#include "tensor/dtype.h"

namespace akv {

// The types quantize_row writes.
bool can_quantize(DType t);
// Quantizes x (a whole number of t's blocks) into out (dtype_row_bytes(t, x.size()) bytes).
// AKV_CHECK on sizes and on a type can_quantize refuses.
void quantize_row(DType t, std::span<const float> x, std::span<std::uint8_t> out);

}  // namespace akv
