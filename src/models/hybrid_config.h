// The config of hybrid linear-attention models (Qwen3-Next, Qwen3.5 dense and MoE): which
// layers are Gated DeltaNet layers and their shapes, and the MoE with a shared expert of
// Qwen3-Next / Qwen3.5-MoE. Parsed from config.json by parse_model_config (config.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace akv {

// Gated DeltaNet ("linear_attention") layers: a causal depthwise conv over [q | k | v], then
// the gated delta rule with n_k_heads query/key heads shared by n_v_heads value heads.
struct LinearAttentionConfig {
  std::vector<bool> layer_is_linear;  // [n_layers]; empty for models without such layers
  std::int64_t n_k_heads = 0;
  std::int64_t n_v_heads = 0;  // a multiple of n_k_heads
  std::int64_t k_head_dim = 0;
  std::int64_t v_head_dim = 0;
  std::int64_t conv_kernel = 0;  // taps of the short convolution

  bool any() const {
    for (bool b : layer_is_linear)
      if (b) return true;
    return false;
  }
  std::int64_t key_dim() const { return n_k_heads * k_head_dim; }
  std::int64_t value_dim() const { return n_v_heads * v_head_dim; }
  std::int64_t conv_channels() const { return 2 * key_dim() + value_dim(); }  // [q | k | v]
};

// A sparse MoE block with a sigmoid-gated shared expert (Qwen3-Next, Qwen3.5-MoE):
// y = sum_topk(w_e * expert_e(x)) + sigmoid(x . g) * shared(x). As parsed; the config fills
// ModelConfig::moe from it (shared_inter), and the common MoE block (moe_block.h) runs it.
struct SharedExpertMoeConfig {
  std::int64_t n_experts = 0;  // 0: dense MLP in every layer
  std::int64_t top_k = 0;
  std::int64_t expert_intermediate = 0;
  std::int64_t shared_intermediate = 0;
  bool norm_topk_prob = true;
  std::int64_t sparse_step = 1;               // layer l is sparse when (l + 1) % step == 0 ...
  std::vector<std::int64_t> mlp_only_layers;  // ... and l is not listed here

  bool layer_is_sparse(std::int64_t layer) const;
};

struct HybridConfig {
  LinearAttentionConfig linear;
  SharedExpertMoeConfig moe;
};

// Reads the hybrid fields of a config.json object (layer_types with "linear_attention",
// linear_*, num_experts, ...). Throws Error{BadFormat} naming `file` and the field.
HybridConfig parse_hybrid_config(const nlohmann::json& root, const std::string& file,
                                 std::int64_t n_layers);

}  // namespace akv
