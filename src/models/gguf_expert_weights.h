// GGUF's stacked expert tensors (llama.cpp's blk.N.ffn_{gate,up,down}_exps.{weight,bias}) ->
// the checkpoint tensors the MoE families load, so qwen3_moe and gpt_oss have no GGUF code:
// Qwen3-MoE's (and the hybrids') per-expert mlp.experts.E.{gate,up,down}_proj.weight (slices of the
// stack, in their GGUF blocks when the backend takes the types, else dequantized); GPT-OSS's
// experts.gate_up_proj ([E, hidden, 2 * inter], gate and up interleaved, as released) and
// experts.down_proj ([E, inter, hidden]) with their biases, or for MXFP4 files the released
// experts.*_{blocks,scales} (ggml's block layout undone). Internal to gguf_weights.cpp; not a
// public entry point.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "models/config.h"
#include "tensor/gguf.h"
#include "tensor/safetensors.h"

namespace akv {

// The tensors of one weights_from_gguf result and the buffers those not in the mapping use.
struct MappedTensors {
  std::vector<TensorInfo> tensors;
  std::vector<std::vector<std::uint8_t>> storage;  // moving it keeps each buffer's address

  // `bytes` kept in storage; the returned span stays valid as long as this object.
  std::span<const std::uint8_t> keep(std::vector<std::uint8_t> bytes);
  // A tensor over `bytes` (the GGUF file's mapping, or keep's).
  void add(std::string name, DType dtype, std::vector<std::int64_t> shape,
           std::span<const std::uint8_t> bytes, const std::string& file);
};

// Tensor `name` of `gguf`; Error{NotFound} when absent, Error{BadFormat} naming the file and the
// tensor when its shape (checkpoint order) is not `shape`.
const GgufTensor& gguf_tensor_of_shape(const GgufReader& gguf, const std::string& name,
                                       const std::vector<std::int64_t>& shape);

// F32/F16/BF16 as a DType; nullopt for quantized types.
std::optional<DType> plain_dtype(GgmlType t);

// f32 values -> `dtype` (F32, BF16 or F16) bytes.
std::vector<std::uint8_t> encode_f32(std::span<const float> v, DType dtype);

// Whether the backend takes quantized weights of a type as they are (weights_from_gguf's).
using KeepQuantized = std::function<bool(DType)>;

// Appends layer `layer`'s expert tensors under checkpoint names, float ones in `dtype`.
// Qwen3-MoE and the hybrids (Qwen3-Next, Qwen3.5-MoE) take gate and up from ffn_gate_exps and
// ffn_up_exps, or from the halves of each expert in ffn_gate_up_exps (--fuse-gate-up-exps).
// Qwen3-MoE stacks that are all quantized, of types keep_quantized accepts, with gate and up of
// one type, stay in their blocks (TensorInfo of the block dtype, zero copy); others are
// dequantized to `dtype`. Throws Error{BadFormat} naming the file and tensor for a missing tensor
// or a shape other than the config's, Error{Unsupported} for MXFP4 experts mixed with other types.
void append_gguf_experts(const GgufReader& gguf, const ModelConfig& config, std::int64_t layer,
                         DType dtype, const KeepQuantized& keep_quantized, MappedTensors& out);

}  // namespace akv
