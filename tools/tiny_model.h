// Deterministic random Hugging Face checkpoints (config.json + safetensors) of any supported
// family and size, for tests and benchmarks. Not a model zoo: the weights are noise, scaled so
// that activations stay O(1) through the layers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/safetensors.h"

namespace akv {

// Llama 3 style rope_scaling (rope_type "llama3").
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position_embeddings = 8192;
};

// GPT-OSS's rope_scaling (rope_type "yarn", truncate false); the defaults are gpt-oss-20b's.
struct YarnRopeScaling {
  double factor = 32.0;
  std::int64_t original_max_position_embeddings = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

// The routed experts of families qwen3_moe (every layer sparse, softmax top-k, renormalised) and
// gpt_oss (every layer sparse, top-k then softmax, biases, width `intermediate`).
struct TinyMoeSpec {
  std::int64_t n_experts = 8;
  std::int64_t top_k = 2;
  std::int64_t expert_intermediate = 32;  // qwen3_moe's moe_intermediate_size: one expert's width
  // gpt_oss: MXFP4 writes the released layout (U8 `*_blocks` [E, rows, cols / 32, 16] of E2M1
  // codes and `*_scales` [E, rows, cols / 32] of E8M0, plus quantization_config); F32, BF16 or
  // F16 writes float `gate_up_proj` [E, hidden, 2 * inter] and `down_proj` [E, inter, hidden].
  DType expert_dtype = DType::MXFP4;
};

struct TinyModelSpec {
  // llama | mistral | qwen2 | qwen3 | qwen3_moe | gemma3 | phi3 | gpt_oss
  std::string family = "llama";
  std::int64_t hidden = 64;
  // The dense MLP's width (qwen3_moe: written to the config only; gpt_oss: each expert's width).
  std::int64_t intermediate = 128;
  std::int64_t layers = 2;
  std::int64_t heads = 4;
  std::int64_t kv_heads = 2;
  std::int64_t head_dim = 0;  // 0: hidden / heads
  std::int64_t vocab = 512;
  DType dtype = DType::F32;  // F32, BF16 or F16
  std::uint64_t seed = 0;
  std::optional<bool> tied;          // unset: the family's usual choice (gemma3 tied, others not)
  std::optional<double> rope_theta;  // unset: the family's usual base
  std::optional<Llama3RopeScaling> rope_scaling;
  YarnRopeScaling yarn;  // gpt_oss only (always YaRN)
  std::int64_t max_position_embeddings = 4096;
  // mistral, gemma3, gpt_oss (every other layer, from the first); unset: 4096 / 512 / 128
  std::optional<std::int64_t> sliding_window;
  std::int64_t bos_token_id = 1;
  std::int64_t eos_token_id = 2;
  std::optional<std::int64_t> pad_token_id;    // gpt_oss; unset: 0
  TinyMoeSpec moe;                             // qwen3_moe and gpt_oss
  std::uint64_t max_shard_bytes = 4ull << 30;  // larger checkpoints are split with an index
};

// Applies a named preset (smollm2-135m, llama3-8b, qwen3-30b-a3b, gpt-oss-20b) over `spec`.
// Throws Error{InvalidArgument}.
void apply_tiny_model_preset(const std::string& preset, TinyModelSpec& spec);

// Checks the spec (known family, positive sizes, heads divisible by kv_heads, float dtype, for
// the MoE families 0 < top_k <= n_experts, for MXFP4 experts hidden and intermediate multiples
// of 32) and fills the family defaults. Throws Error{InvalidArgument} naming the field.
TinyModelSpec resolve_tiny_model_spec(const TinyModelSpec& spec);

// The tensors the checkpoint holds, in file order, with HF names and [out, in] shapes.
std::vector<TensorSpec> tiny_model_tensors(const TinyModelSpec& resolved);

// The model's parameters: every element of a float tensor, two for each byte of MXFP4 codes,
// none for their scales (which only scale them).
std::uint64_t tiny_model_parameters(const TinyModelSpec& resolved);

// config.json text in the transformers 4.x form.
std::string tiny_model_config_json(const TinyModelSpec& resolved);

// Writes config.json and model.safetensors (or model-0000k-of-0000n.safetensors plus
// model.safetensors.index.json when the data exceeds max_shard_bytes) into `dir`, creating it.
// Streams each tensor in chunks: memory use is bounded whatever the model size. A tensor's
// values depend only on (seed, name, element index), so sharding does not change them. MXFP4
// blocks and their scales go to the same shard (llama.cpp's converter pairs them in file order).
// Throws Error{InvalidArgument or Io}.
void write_tiny_model(const TinyModelSpec& spec, const std::string& dir);

}  // namespace akv
