// config.json -> ModelConfig: the one description every family and backend reads.
// Accepts the transformers 4.x form (rope_theta, rope_scaling, sliding_window_pattern) and
// the 5.x form (rope_parameters, optionally keyed by layer type, and layer_types).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/hybrid_config.h"
#include "tensor/dtype.h"

namespace akv {

enum class Family { Llama, Qwen2, Qwen3, Gemma3, Phi3, Qwen3Moe, GptOss, Qwen3Next, Qwen35 };  // Mistral runs as Llama + window

// Qwen3-Next and Qwen3.5: Gated DeltaNet layers next to gated full attention (hybrid_config.h).
inline bool is_hybrid(Family f) { return f == Family::Qwen3Next || f == Family::Qwen35; }
enum class Activation { Silu, GeluTanh };
enum class RopeType { Default, Linear, Dynamic, Yarn, Llama3, LongRope };

// RoPE parameters of one attention kind (Gemma 3 has one for sliding and one for full layers).
struct RopeConfig {
  RopeType type = RopeType::Default;
  double theta = 10000.0;
  double partial_rotary_factor = 1.0;
  double factor = 1.0;
  std::int64_t original_max_position = 0;  // 0: use max_position_embeddings
  double low_freq_factor = 1.0;            // llama3
  double high_freq_factor = 4.0;           // llama3
  double beta_fast = 32.0;                 // yarn
  double beta_slow = 1.0;                  // yarn
  double attention_factor = 0.0;           // yarn/longrope; 0: derive from factor
  double mscale = 0.0, mscale_all_dim = 0.0;  // yarn (DeepSeek-style), 0: unset
  bool truncate = true;                       // yarn
  std::vector<double> long_factor, short_factor;  // longrope
  // Per-frequency divisors applied after the type's formula ([rotary_dim / 2]; empty: none):
  // GGUF files carry Llama 3 scaling this way (the converter's rope_freqs tensor).
  std::vector<double> freq_factors;
};

// The mixture-of-experts part of a config (n_experts == 0: a dense model).
struct MoeConfig {
  std::int64_t n_experts = 0;     // num_experts / num_local_experts
  std::int64_t top_k = 0;         // num_experts_per_tok
  std::int64_t inter = 0;         // one expert's width: moe_intermediate_size, else intermediate_size
  bool norm_topk_prob = false;    // Qwen3-MoE: renormalise the k softmax weights to sum 1
  double swiglu_limit = 0.0;      // GPT-OSS clamp (swiglu_limit, default 7)
  std::int64_t shared_inter = 0;  // Qwen3-Next / Qwen3.5-MoE: the sigmoid-gated shared expert's width (0: none)
  std::vector<bool> layer_is_moe; // [n_layers]; false: a dense MLP of intermediate_size
};

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  std::string model_type;    // e.g. "llama"
  Family family = Family::Llama;

  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t n_layers = 0;
  std::int64_t n_heads = 0;
  std::int64_t n_kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  Activation activation = Activation::Silu;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (Qwen2, or Llama with attention_bias)
  bool mlp_bias = false;

  std::int64_t sliding_window = 0;       // 0: none
  std::vector<bool> layer_is_sliding;    // [n_layers]
  RopeConfig rope;                       // full-attention layers (all layers when not Gemma)
  RopeConfig rope_sliding;               // sliding layers (Gemma 3 local base); else = rope

  double attention_scale = 0.0;          // q scale; 1/sqrt(head_dim) or Gemma's query_pre_attn_scalar
  double attn_logit_softcap = 0.0;       // 0: none
  double final_logit_softcap = 0.0;      // 0: none
  double embedding_multiplier = 1.0;     // Gemma: sqrt(hidden_size)

  MoeConfig moe;

  DType dtype = DType::F32;  // torch_dtype / dtype of the checkpoint
  HybridConfig hybrid;  // linear-attention layers and shared-expert MoE (hybrid families only)

  std::int32_t bos_token_id = -1;
  std::vector<std::int32_t> eos_token_ids;
};

// Parses and validates config.json text. `file_label` names the file in errors.
// Throws Error{BadFormat} (missing/out-of-range field, named) or Error{Unsupported}
// (an architecture or feature we do not run, e.g. a mixture of experts other than Qwen3-MoE
// and GPT-OSS).
ModelConfig parse_model_config(const std::string& json_text, const std::string& file_label);

// Reads and parses `<model_dir>/config.json`.
ModelConfig load_model_config(const std::string& model_dir);

std::string_view family_name(Family f);

}  // namespace akv
