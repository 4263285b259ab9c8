#include "models/hybrid_config.h"

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace akv {

namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& file, const std::string& field,
                       const std::string& problem) {
  throw Error(ErrorKind::BadFormat, file + ": field '" + field + "': " + problem);
}

std::int64_t positive(const json& o, const std::string& file, const char* key) {
  if (!o.contains(key) || !o[key].is_number_integer())
    fail(file, key, "missing (expected a positive integer)");
  const auto v = o[key].get<std::int64_t>();
  if (v <= 0) fail(file, key, "must be positive, got " + std::to_string(v));
  return v;
}

std::int64_t integer_or(const json& o, const char* key, std::int64_t fallback,
                        const std::string& file) {
  if (!o.contains(key) || o[key].is_null()) return fallback;
  if (!o[key].is_number_integer()) fail(file, key, "expected an integer");
  return o[key].get<std::int64_t>();
}

LinearAttentionConfig read_linear(const json& o, const std::string& file, std::int64_t n_layers) {
  LinearAttentionConfig la;
  if (!o.contains("layer_types") || !o["layer_types"].is_array()) return la;
  const json& lt = o["layer_types"];
  if (static_cast<std::int64_t>(lt.size()) != n_layers)
    fail(file, "layer_types", "expected a list of num_hidden_layers entries");
  la.layer_is_linear.assign(n_layers, false);
  for (std::int64_t i = 0; i < n_layers; ++i)
    la.layer_is_linear[i] = lt[i].is_string() && lt[i] == "linear_attention";
  if (!la.any()) {
    la.layer_is_linear.clear();
    return la;
  }
  la.n_k_heads = positive(o, file, "linear_num_key_heads");
  la.n_v_heads = positive(o, file, "linear_num_value_heads");
  la.k_head_dim = positive(o, file, "linear_key_head_dim");
  la.v_head_dim = positive(o, file, "linear_value_head_dim");
  la.conv_kernel = positive(o, file, "linear_conv_kernel_dim");
  if (la.n_v_heads % la.n_k_heads != 0)
    fail(file, "linear_num_value_heads", "must be a multiple of linear_num_key_heads");
  return la;
}

SharedExpertMoeConfig read_moe(const json& o, const std::string& file) {
  SharedExpertMoeConfig m;
  m.n_experts = integer_or(o, "num_experts", 0, file);
  if (m.n_experts <= 0) {
    m.n_experts = 0;
    return m;
  }
  m.top_k = positive(o, file, "num_experts_per_tok");
  if (m.top_k > m.n_experts) fail(file, "num_experts_per_tok", "exceeds num_experts");
  m.expert_intermediate = positive(o, file, "moe_intermediate_size");
  m.shared_intermediate = positive(o, file, "shared_expert_intermediate_size");
  if (o.contains("norm_topk_prob") && !o["norm_topk_prob"].is_null()) {
    if (!o["norm_topk_prob"].is_boolean()) fail(file, "norm_topk_prob", "expected true or false");
    m.norm_topk_prob = o["norm_topk_prob"].get<bool>();
  }
  m.sparse_step = integer_or(o, "decoder_sparse_step", 1, file);
  if (m.sparse_step <= 0) fail(file, "decoder_sparse_step", "must be positive");
  if (o.contains("mlp_only_layers") && o["mlp_only_layers"].is_array())
    for (const json& v : o["mlp_only_layers"]) {
      if (!v.is_number_integer()) fail(file, "mlp_only_layers", "expected integers");
      m.mlp_only_layers.push_back(v.get<std::int64_t>());
    }
  return m;
}

}  // namespace

bool SharedExpertMoeConfig::layer_is_sparse(std::int64_t layer) const {
  if (n_experts == 0) return false;
  for (std::int64_t l : mlp_only_layers)
    if (l == layer) return false;
  return (layer + 1) % sparse_step == 0;
}

HybridConfig parse_hybrid_config(const json& root, const std::string& file, std::int64_t n_layers) {
  return {.linear = read_linear(root, file, n_layers), .moe = read_moe(root, file)};
}

}  // namespace akv
