// A hybrid GGUF file's Gated DeltaNet tensors (llama.cpp's blk.N.ssm_*, attn_qkv, attn_gate)
// -> the checkpoint's model.layers.N.linear_attn.* tensors, undoing what the converter did:
//   - A stored as -exp(A_log): A_log = log(-A); conv1d squeezed to [C, K]: back to [C, 1, K];
//     dt_bias named ssm_dt.bias;
//   - Qwen3.5 (qwen35, qwen35moe): value heads reordered from grouped by key head
//     [k0: v0 v1 | k1: v0 v1] to tiled [k0v0 k1v0 | k0v1 k1v1] (for ggml's broadcast) in the v
//     rows of in_proj_qkv and the conv, in_proj_z, in_proj_b/a, A, dt_bias and out_proj's
//     columns: put back in grouped order;
//   - Qwen3-Next (qwen3next): in_proj_qkvz split into attn_qkv [q | k | v] and attn_gate (z),
//     the separate projections Qwen3.5 checkpoints have, and loaded in that form; ssm_ba, b and
//     a interleaved per key-head group as in the checkpoint, split into in_proj_b and in_proj_a.
//     Files of older converters keep the checkpoint's in_proj_qkvz as ssm_in: loaded as it is,
//     with ssm_ba as in_proj_ba.
// The norm weights' +1 is undone by weights_from_gguf with the other norms'. Internal to
// gguf_weights.cpp; not a public entry point.
#pragma once

#include <cstdint>
#include <string_view>

#include "models/config.h"
#include "models/gguf_expert_weights.h"
#include "tensor/gguf.h"

namespace akv {

// Whether a per-layer GGUF tensor stem ("ssm_a", "attn_qkv", ...) is one that
// append_gguf_linear_attention maps (weights_from_gguf skips them).
bool is_gguf_linear_attention_stem(std::string_view stem);

// Appends Gated DeltaNet layer `layer`'s tensors under checkpoint names: float ones in `dtype`,
// quantized matrices of types keep_quantized accepts in their blocks (rows reordered whole),
// other quantized ones dequantized. out_proj's columns move within rows, so a quantized out_proj
// whose value heads need reordering is dequantized. Throws Error{BadFormat} naming the file and
// the tensor for a missing tensor, a shape other than the config's, or an A that is not negative.
void append_gguf_linear_attention(const GgufReader& gguf, const ModelConfig& config,
                                  std::int64_t layer, DType dtype,
                                  const KeepQuantized& keep_quantized, MappedTensors& out);

}  // namespace akv
