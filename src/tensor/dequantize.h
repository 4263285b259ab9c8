// The scalar dequantization oracle: every GGUF tensor type we read -> f32, one plain loop per
// block type, bit-exact with the GGUF ecosystem's reference dequantizers (tests/tensor fixtures).
// Fast kernels prove themselves against this; it is not meant to be fast.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tensor/gguf.h"
#include "tensor/gguf_types.h"

namespace akv {

// Dequantizes dst.size() elements of `type` stored in `src` into `dst`. dst.size() must be a
// whole number of blocks and src.size() exactly their bytes (AKV_CHECK: callers size them from
// the validated tensor info). Integer types are converted to float.
void dequantize(GgmlType type, std::span<const std::uint8_t> src, std::span<float> dst);

// The whole tensor as f32, [numel] in storage order (ne[0] fastest).
std::vector<float> dequantize_tensor(const GgufTensor& t);

}  // namespace akv
