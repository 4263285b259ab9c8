// A GGUF file's tensors under the checkpoint (Hugging Face) names the families load, so GGUF is
// a second weight source beside safetensors with no family code of its own. Undoes what
// llama.cpp's converter did: the Q/K row permutation of llama-arch files, the +1 on Gemma's and
// the hybrids' norm weights, the stacked experts (gguf_expert_weights.h) and the hybrids' Gated
// DeltaNet layouts (gguf_hybrid_weights.h); rows stay in the checkpoint orientation ([out, in]).
// Multi-token-prediction blocks after the decoder's are not loaded.
// Quantized matrices of a type the backend's matmul takes stay in their blocks (the Q/K row
// permutation moves whole block rows); every other quantized tensor is dequantized here, at
// load, into one float dtype for the whole model.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "models/config.h"
#include "tensor/dtype.h"
#include "tensor/gguf.h"
#include "tensor/safetensors.h"

namespace akv {

// The checkpoint name of a GGUF tensor ("blk.3.attn_q.weight" -> "model.layers.3.self_attn.
// q_proj.weight"), nullopt for tensors the families do not load (rope_freqs, ...).
std::optional<std::string> hf_tensor_name(std::string_view gguf_name, Family family);

// The dtype the weights of `gguf` load in: the file's own float type when all its matrices are
// F32, F16 or BF16 (F16/BF16 win over F32); `quantized_dtype` when any is quantized.
DType gguf_weight_dtype(const GgufReader& gguf, DType quantized_dtype);

// Every tensor the families load, converted to `dtype` (zero copy when the stored type already
// is `dtype` and nothing needs undoing), except 2-D tensors of a quantized type t with
// keep_quantized(t), which keep their blocks as TensorInfo of dtype t, shape [rows, cols].
// The result keeps `gguf`'s mappings alive.
// Throws Error naming the file and tensor for a tensor whose shape cannot be mapped.
SafetensorsReader weights_from_gguf(
    std::shared_ptr<const GgufReader> gguf, const ModelConfig& config, DType dtype,
    const std::function<bool(DType)>& keep_quantized = [](DType) { return false; });

}  // namespace akv
