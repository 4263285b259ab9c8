// GGUF keys -> ModelConfig. Defaults follow what llama.cpp assumes when a key is absent, and
// what it hard-codes per architecture (Gemma 3's sliding-window pattern and local RoPE base;
// GPT-OSS's alternating window, SwiGLU clamp and untruncated YaRN; Qwen3-MoE's renormalised
// top-k).
#include "models/gguf_config.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "tensor/dequantize.h"

namespace akv {

namespace {

struct ArchInfo {
  std::string_view gguf, hf;
  Family family;
};
constexpr ArchInfo kArchs[] = {
    {"llama", "LlamaForCausalLM", Family::Llama},
    {"qwen2", "Qwen2ForCausalLM", Family::Qwen2},
    {"qwen3", "Qwen3ForCausalLM", Family::Qwen3},
    {"gemma3", "Gemma3ForCausalLM", Family::Gemma3},
    {"phi3", "Phi3ForCausalLM", Family::Phi3},
    {"qwen3moe", "Qwen3MoeForCausalLM", Family::Qwen3Moe},
    {"gpt-oss", "GptOssForCausalLM", Family::GptOss},
    {"qwen3next", "Qwen3NextForCausalLM", Family::Qwen3Next},
    {"qwen35", "Qwen3_5ForCausalLM", Family::Qwen35},
    {"qwen35moe", "Qwen3_5MoeForCausalLM", Family::Qwen35},
};
constexpr std::string_view kArchNames =
    "llama, qwen2, qwen3, gemma3, phi3, qwen3moe, gpt-oss, qwen3next, qwen35, qwen35moe";

[[noreturn]] void fail_key(const GgufReader& g, const std::string& key,
                           const std::string& problem) {
  throw Error(ErrorKind::BadFormat, g.path() + ": metadata key '" + key + "': " + problem);
}

// A required positive integer key.
std::int64_t positive(const GgufReader& g, const std::string& key) {
  const std::int64_t v = static_cast<std::int64_t>(g.metadata().get_u64(key));
  if (v <= 0) fail_key(g, key, "must be positive");
  return v;
}

std::vector<double> f32_tensor_values(const GgufTensor& t) {
  const std::vector<float> f = dequantize_tensor(t);
  return {f.begin(), f.end()};
}

void read_rope(const GgufReader& g, const std::string& a, ModelConfig& c) {
  const GgufMetadata& md = g.metadata();
  RopeConfig& r = c.rope;
  r.theta = md.find_f32(a + ".rope.freq_base").value_or(10000.0f);
  if (r.theta <= 0) fail_key(g, a + ".rope.freq_base", "must be positive");
  if (const auto rot = md.find_u32(a + ".rope.dimension_count")) {
    if (*rot == 0 || *rot > c.head_dim || *rot % 2 != 0)
      fail_key(g, a + ".rope.dimension_count", "must be even and in (0, head_dim]");
    r.partial_rotary_factor = static_cast<double>(*rot) / static_cast<double>(c.head_dim);
  }
  r.original_max_position = md.find_u32(a + ".rope.scaling.original_context_length").value_or(0);
  const std::string type = md.find_string(a + ".rope.scaling.type").value_or("none");
  const double factor = md.find_f32(a + ".rope.scaling.factor").value_or(1.0f);
  if (type == "linear") {
    r.type = RopeType::Linear;
    r.factor = factor;
  } else if (type == "yarn") {
    r.type = RopeType::Yarn;
    r.factor = factor;
    r.beta_fast = md.find_f32(a + ".rope.scaling.yarn_beta_fast").value_or(32.0f);
    r.beta_slow = md.find_f32(a + ".rope.scaling.yarn_beta_slow").value_or(1.0f);
    r.attention_factor = md.find_f32(a + ".rope.scaling.yarn_attn_factor").value_or(0.0f);
  } else if (type == "longrope") {
    r.type = RopeType::LongRope;
    r.attention_factor = md.find_f32(a + ".rope.scaling.attn_factor").value_or(0.0f);
    const GgufTensor* lf = g.find("rope_factors_long.weight");
    const GgufTensor* sf = g.find("rope_factors_short.weight");
    if (lf == nullptr || sf == nullptr)
      throw Error(ErrorKind::BadFormat,
                  g.path() + ": longrope scaling without rope_factors_long/short tensors");
    r.long_factor = f32_tensor_values(*lf);
    r.short_factor = f32_tensor_values(*sf);
  } else if (type != "none") {
    throw Error(ErrorKind::Unsupported, g.path() + ": metadata key '" + a +
                                            ".rope.scaling.type': '" + type +
                                            "' is not supported (none, linear, yarn, longrope)");
  }
  if (r.factor <= 0) fail_key(g, a + ".rope.scaling.factor", "must be positive");
  // The released GPT-OSS configs say truncate: false; llama.cpp hard-codes the same.
  if (c.family == Family::GptOss) r.truncate = false;
  // Llama 3 scaling arrives as per-frequency divisors.
  if (const GgufTensor* f = g.find("rope_freqs.weight")) r.freq_factors = f32_tensor_values(*f);

  const auto half = static_cast<std::size_t>(
      static_cast<std::int64_t>(static_cast<double>(c.head_dim) * r.partial_rotary_factor) / 2);
  if (!r.freq_factors.empty() && r.freq_factors.size() != half)
    throw Error(ErrorKind::BadFormat, g.path() + ": tensor 'rope_freqs.weight' has " +
                                          std::to_string(r.freq_factors.size()) +
                                          " entries, expected " + std::to_string(half));
  if (r.type == RopeType::LongRope &&
      (r.long_factor.size() != half || r.short_factor.size() != half))
    throw Error(ErrorKind::BadFormat, g.path() + ": rope_factors_long/short need " +
                                          std::to_string(half) + " entries each");

  c.rope_sliding = c.rope;
  if (c.family == Family::Gemma3) {
    // Local layers: plain RoPE with their own base (llama.cpp's default 10000 when absent).
    c.rope_sliding = RopeConfig{};
    c.rope_sliding.theta = md.find_f32(a + ".rope.freq_base_swa").value_or(10000.0f);
  }
}

void read_sliding(const GgufReader& g, const std::string& a, ModelConfig& c) {
  const GgufMetadata& md = g.metadata();
  c.sliding_window = md.find_u32(a + ".attention.sliding_window").value_or(0);
  c.layer_is_sliding.assign(static_cast<std::size_t>(c.n_layers), false);
  if (c.sliding_window == 0) return;
  const std::string pattern_key = a + ".attention.sliding_window_pattern";
  const GgufValue* pattern = md.find(pattern_key);
  if (pattern != nullptr && pattern->type == GgufValueType::Array) {
    if (pattern->elem_type != GgufValueType::Bool ||
        pattern->n_elems != static_cast<std::uint64_t>(c.n_layers))
      fail_key(g, pattern_key, "expected an array of block_count booleans");
    for (std::int64_t i = 0; i < c.n_layers; ++i) c.layer_is_sliding[i] = pattern->raw[i] != 0;
  } else {
    // A period n: every n-th layer is global. Gemma 3 uses 6 and GPT-OSS 2 when the key is
    // absent.
    std::int64_t n = 0;
    if (pattern != nullptr)
      n = md.get_u32(pattern_key);
    else if (c.family == Family::Gemma3)
      n = 6;
    else if (c.family == Family::GptOss)
      n = 2;
    for (std::int64_t i = 0; i < c.n_layers; ++i)
      c.layer_is_sliding[i] = n <= 0 || (i + 1) % n != 0;
  }
  bool any = false;
  for (bool s : c.layer_is_sliding) any |= s;
  if (!any) c.sliding_window = 0;
}

// Whether layer `l` has stacked experts (gate and up apart, or fused by --fuse-gate-up-exps).
bool has_experts(const GgufReader& g, std::int64_t l) {
  const std::string blk = "blk." + std::to_string(l) + ".";
  return g.find(blk + "ffn_gate_exps.weight") != nullptr ||
         g.find(blk + "ffn_gate_up_exps.weight") != nullptr;
}

// Experts on the layers that have stacked expert tensors (Qwen3-MoE's mlp_only layers keep a
// dense ffn_gate/up/down); the expert width from expert_feed_forward_length.
void read_moe(const GgufReader& g, const std::string& a, ModelConfig& c) {
  MoeConfig& m = c.moe;
  m.n_experts = positive(g, a + ".expert_count");
  m.top_k = positive(g, a + ".expert_used_count");
  if (m.top_k > m.n_experts) fail_key(g, a + ".expert_used_count", "exceeds the expert count");
  m.inter = positive(g, a + ".expert_feed_forward_length");
  m.layer_is_moe.assign(static_cast<std::size_t>(c.n_layers), false);
  for (std::int64_t l = 0; l < c.n_layers; ++l) m.layer_is_moe[l] = has_experts(g, l);
  if (c.family == Family::Qwen3Moe) {
    // Not stored: llama.cpp always renormalises Qwen3-MoE's top-k weights, as every released
    // Qwen3-MoE config does.
    m.norm_topk_prob = g.metadata().find_bool(a + ".expert_weights_norm").value_or(true);
  } else {
    for (std::int64_t l = 0; l < c.n_layers; ++l)
      if (!m.layer_is_moe[l])
        throw Error(ErrorKind::BadFormat, g.path() + ": tensor 'blk." + std::to_string(l) +
                                              ".ffn_gate_exps.weight' is missing (every GPT-OSS "
                                              "layer is a mixture of experts)");
    m.swiglu_limit = 7.0;  // not stored; llama.cpp hard-codes it too
    c.intermediate_size = m.inter;
  }
}

// Which of the `n_all` blocks (MTP blocks included) are Gated DeltaNet layers: the
// attention.recurrent_layers key (an array with one flag per block, or one flag for all) when
// present, else every full_attention_interval-th layer (default 4, as llama.cpp) is full attention.
std::vector<bool> read_linear_layers(const GgufReader& g, const std::string& a, std::int64_t n_all,
                                     std::int64_t n_layers) {
  const GgufMetadata& md = g.metadata();
  std::vector<bool> linear(static_cast<std::size_t>(n_layers), false);
  const std::string key = a + ".attention.recurrent_layers";
  if (const GgufValue* v = md.find(key)) {
    if (v->type == GgufValueType::Array) {
      if (v->n_elems != static_cast<std::uint64_t>(n_all))
        fail_key(g, key, "expected block_count entries");
      if (v->elem_type == GgufValueType::Bool) {
        for (std::int64_t l = 0; l < n_layers; ++l) linear[l] = v->raw[l] != 0;
      } else {
        const std::vector<std::int32_t> flags = md.get_i32_array(key);
        for (std::int64_t l = 0; l < n_layers; ++l) linear[l] = flags[l] != 0;
      }
      return linear;
    }
    const bool all = v->type == GgufValueType::Bool ? md.get_bool(key) : md.get_u32(key) != 0;
    linear.assign(linear.size(), all);
    return linear;
  }
  const std::uint32_t interval = md.find_u32(a + ".full_attention_interval").value_or(4);
  if (interval == 0) fail_key(g, a + ".full_attention_interval", "must be positive");
  for (std::int64_t l = 0; l < n_layers; ++l) linear[l] = (l + 1) % interval != 0;
  return linear;
}

// Qwen3-Next / Qwen3.5: the Gated DeltaNet shapes under llama.cpp's ssm.* names (group_count:
// key heads, time_step_rank: value heads, state_size: key head width, inner_size: value heads x
// value head width, conv_kernel), the linear layers, and the MoE with a sigmoid-gated shared
// expert on the layers with stacked experts. The router's renormalised top-k is not stored:
// llama.cpp always renormalises for these architectures, as config.json does for Qwen3.5.
void read_hybrid(const GgufReader& g, const std::string& a, std::int64_t n_all, ModelConfig& c) {
  const GgufMetadata& md = g.metadata();
  LinearAttentionConfig& la = c.hybrid.linear;
  la.n_k_heads = positive(g, a + ".ssm.group_count");
  la.n_v_heads = positive(g, a + ".ssm.time_step_rank");
  la.k_head_dim = positive(g, a + ".ssm.state_size");
  la.conv_kernel = positive(g, a + ".ssm.conv_kernel");
  const std::int64_t inner = positive(g, a + ".ssm.inner_size");
  if (la.n_v_heads % la.n_k_heads != 0)
    fail_key(g, a + ".ssm.time_step_rank", "must be a multiple of ssm.group_count");
  if (inner % la.n_v_heads != 0)
    fail_key(g, a + ".ssm.inner_size", "must be a multiple of ssm.time_step_rank");
  la.v_head_dim = inner / la.n_v_heads;
  la.layer_is_linear = read_linear_layers(g, a, n_all, c.n_layers);

  SharedExpertMoeConfig& m = c.hybrid.moe;
  m.n_experts = md.find_u32(a + ".expert_count").value_or(0);
  if (m.n_experts == 0) return;
  m.top_k = positive(g, a + ".expert_used_count");
  if (m.top_k > m.n_experts) fail_key(g, a + ".expert_used_count", "exceeds the expert count");
  m.expert_intermediate = positive(g, a + ".expert_feed_forward_length");
  m.shared_intermediate = positive(g, a + ".expert_shared_feed_forward_length");
  m.norm_topk_prob = md.find_bool(a + ".expert_weights_norm").value_or(true);
  c.moe = {.n_experts = m.n_experts,
           .top_k = m.top_k,
           .inter = m.expert_intermediate,
           .norm_topk_prob = m.norm_topk_prob,
           .swiglu_limit = 0.0,
           .shared_inter = m.shared_intermediate,
           .layer_is_moe = std::vector<bool>(static_cast<std::size_t>(c.n_layers), false)};
  for (std::int64_t l = 0; l < c.n_layers; ++l) {
    c.moe.layer_is_moe[l] = has_experts(g, l);
    if (!c.moe.layer_is_moe[l]) m.mlp_only_layers.push_back(l);
  }
}

}  // namespace

std::string hf_architecture_for_gguf(std::string_view gguf_arch) {
  for (const ArchInfo& a : kArchs)
    if (a.gguf == gguf_arch) return std::string(a.hf);
  return {};
}

ModelConfig model_config_from_gguf(const GgufReader& g) {
  const GgufMetadata& md = g.metadata();
  const std::string a = md.get_string("general.architecture");
  const ArchInfo* arch = nullptr;
  for (const ArchInfo& x : kArchs)
    if (x.gguf == a) arch = &x;
  if (arch == nullptr)
    throw Error(ErrorKind::Unsupported, g.path() + ": GGUF architecture '" + a +
                                            "' is not supported (" + std::string(kArchNames) + ")");
  const bool moe = arch->family == Family::Qwen3Moe || arch->family == Family::GptOss;
  const bool hybrid = is_hybrid(arch->family);
  if (!moe && !hybrid && md.find_u32(a + ".expert_count").value_or(0) > 0)
    throw Error(ErrorKind::Unsupported,
                g.path() + ": mixture-of-experts '" + a +
                    "' models are not supported (qwen3moe, gpt-oss, qwen3next, qwen35moe)");

  ModelConfig c;
  c.architecture = std::string(arch->hf);
  c.model_type = a;
  c.family = arch->family;
  c.hidden_size = positive(g, a + ".embedding_length");
  const std::string ffn_key = a + ".feed_forward_length";
  if (!hybrid || md.has(ffn_key)) c.intermediate_size = positive(g, ffn_key);
  // Multi-token-prediction blocks (Qwen3-Next, Qwen3.5) follow the decoder's; we do not run them.
  const std::int64_t n_all = positive(g, a + ".block_count");
  const std::int64_t n_mtp = md.find_u32(a + ".nextn_predict_layers").value_or(0);
  if (n_mtp >= n_all) fail_key(g, a + ".nextn_predict_layers", "must be below block_count");
  c.n_layers = n_all - n_mtp;
  if (hybrid) {
    read_hybrid(g, a, n_all, c);
    // A hybrid MoE may have no dense MLP: size the MLP scratch for its experts, as config.json's.
    if (!md.has(ffn_key))
      c.intermediate_size = c.hybrid.moe.n_experts > 0 ? std::max(c.hybrid.moe.expert_intermediate,
                                                                  c.hybrid.moe.shared_intermediate)
                                                       : positive(g, ffn_key);
  }
  c.n_heads = positive(g, a + ".attention.head_count");
  c.n_kv_heads = md.has(a + ".attention.head_count_kv")
                     ? positive(g, a + ".attention.head_count_kv")
                     : c.n_heads;
  if (c.n_heads % c.n_kv_heads != 0)
    fail_key(g, a + ".attention.head_count_kv",
             "must divide the head count " + std::to_string(c.n_heads));
  if (md.has(a + ".attention.key_length"))
    c.head_dim = positive(g, a + ".attention.key_length");
  else if (c.hidden_size % c.n_heads == 0)
    c.head_dim = c.hidden_size / c.n_heads;
  else
    fail_key(g, a + ".attention.key_length",
             "missing and the embedding length is not a multiple of the head count");
  if (const auto v = md.find_u32(a + ".attention.value_length"); v && *v != c.head_dim)
    throw Error(ErrorKind::Unsupported, g.path() + ": value_length != key_length is not supported");
  if (c.head_dim % 2 != 0) fail_key(g, a + ".attention.key_length", "must be even for RoPE");

  const GgufTensor& embd = g.get_or_throw("token_embd.weight");
  c.vocab_size = md.has(a + ".vocab_size") ? positive(g, a + ".vocab_size") : embd.shape()[0];
  c.max_position_embeddings =
      md.has(a + ".context_length") ? positive(g, a + ".context_length") : 4096;
  c.rms_norm_eps = md.find_f32(a + ".attention.layer_norm_rms_epsilon").value_or(1e-6f);
  if (c.rms_norm_eps <= 0 || c.rms_norm_eps > 1)
    fail_key(g, a + ".attention.layer_norm_rms_epsilon", "must be in (0, 1]");
  c.tie_word_embeddings = g.find("output.weight") == nullptr;
  c.attention_bias =
      g.find("blk.0.attn_q.bias") != nullptr || g.find("blk.0.attn_qkv.bias") != nullptr;
  c.mlp_bias = g.find("blk.0.ffn_up.bias") != nullptr;
  c.activation = c.family == Family::Gemma3 ? Activation::GeluTanh : Activation::Silu;

  read_sliding(g, a, c);
  read_rope(g, a, c);
  if (moe) read_moe(g, a, c);

  c.attention_scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  if (c.family == Family::Gemma3) {
    // query_pre_attn_scalar is not stored; llama.cpp uses hidden / heads for the 62-layer 27B
    // and head_dim otherwise, as the released checkpoints do.
    if (c.n_layers == 62)
      c.attention_scale = 1.0 / std::sqrt(static_cast<double>(c.hidden_size / c.n_heads));
    c.embedding_multiplier = std::sqrt(static_cast<double>(c.hidden_size));
  }
  c.attn_logit_softcap = md.find_f32(a + ".attn_logit_softcapping").value_or(0.0f);
  c.final_logit_softcap = md.find_f32(a + ".final_logit_softcapping").value_or(0.0f);
  c.bos_token_id = md.find_i32("tokenizer.ggml.bos_token_id").value_or(-1);
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"}) {
    const auto id = md.find_i32(key);
    if (id &&
        std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), *id) == c.eos_token_ids.end())
      c.eos_token_ids.push_back(*id);
  }
  return c;
}

}  // namespace akv
