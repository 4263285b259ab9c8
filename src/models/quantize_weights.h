// `--quantize q8_0|q6_k|q4_k`: a safetensors checkpoint's matrices quantized at load into GGUF
// blocks (tensor/quantize.h), so the backend's quantized matmul reads them as it reads a GGUF
// file's. What gets quantized follows the GGUF convention: the attention and MLP projection
// matrices, the token embeddings and lm_head; norms and biases (1-D) stay as they are. A
// matrix whose rows are not whole 256-element blocks takes llama.cpp's fallback for the
// k-quants (Q6_K -> Q8_0, Q4_K -> Q5_0); one not of whole 32-element blocks stays unquantized.
#pragma once

#include <functional>
#include <optional>
#include <string_view>

#include "models/config.h"
#include "tensor/dtype.h"
#include "tensor/safetensors.h"

namespace akv {

// "q8_0" -> Q8_0, "q6_k" -> Q6_K, "q4_k" -> Q4_K; nullopt for anything else.
std::optional<DType> find_quantize_type(std::string_view name);

// The type a matrix of `cols` columns is stored in when the model is quantized to `type`
// (the fallbacks above); nullopt: stays unquantized.
std::optional<DType> quantized_type_for(DType type, std::int64_t cols);

// Whether the backend's matmul takes a weight of this quantized type.
using TakesQuantized = std::function<bool(DType)>;

// `weights` with the matrices above quantized to `type` (a find_quantize_type result).
// Throws Error{Unsupported} for a family other than the dense ones (Llama, Qwen2, Qwen3,
// Gemma3, Phi3), and naming the matrix when its type (a fallback included) is one `takes`
// refuses. Expensive: reads and rewrites every matrix once.
SafetensorsReader quantize_weights(SafetensorsReader weights, const ModelConfig& config,
                                   DType type, const TakesQuantized& takes);

}  // namespace akv
