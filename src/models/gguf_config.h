// GGUF metadata ({arch}.* keys, as llama.cpp's converter writes them) -> the same ModelConfig
// that config.json gives, for the families agentkv runs: llama (and Mistral, which converts to
// llama), qwen2, qwen3, gemma3, phi3, qwen3moe, gpt-oss, and the hybrids qwen3next, qwen35 and
// qwen35moe (HybridConfig from the ssm.* keys). Some facts live in tensors, not keys: vocab size
// (token embedding rows), tied embeddings (no output.weight), attention biases, Llama 3 RoPE
// scaling (rope_freqs), LongRoPE factors, which layers are MoE (ffn_gate_exps).
#pragma once

#include "models/config.h"
#include "tensor/gguf.h"

namespace akv {

// Throws Error{BadFormat} naming the file and the key (missing, wrong type, out of range) or
// Error{Unsupported} for an architecture or feature we do not run (named). `config.dtype` is
// left F32; the weight loader sets it to the dtype it loads the weights in.
ModelConfig model_config_from_gguf(const GgufReader& gguf);

// The Hugging Face architecture name for a GGUF general.architecture ("llama" ->
// "LlamaForCausalLM"); empty when not one we run.
std::string hf_architecture_for_gguf(std::string_view gguf_arch);

}  // namespace akv
