#include "models/config.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mapped_file.h"

namespace akv {

namespace {

using nlohmann::json;

// Reads fields of one JSON object with errors that name the file and the field.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string file, std::string prefix = "")
      : obj_(obj), file_(std::move(file)), prefix_(std::move(prefix)) {}

  bool has(const char* key) const { return obj_.contains(key) && !obj_[key].is_null(); }

  [[noreturn]] void fail(const char* key, const std::string& problem) const {
    throw Error(ErrorKind::BadFormat, file_ + ": field '" + prefix_ + key + "': " + problem);
  }

  std::int64_t integer(const char* key) const {
    if (!has(key)) fail(key, "missing");
    const json& v = obj_[key];
    if (!v.is_number_integer()) fail(key, "expected an integer, got " + v.dump());
    return v.get<std::int64_t>();
  }
  std::int64_t integer(const char* key, std::int64_t fallback) const {
    return has(key) ? integer(key) : fallback;
  }
  std::int64_t positive(const char* key) const {
    const std::int64_t v = integer(key);
    if (v <= 0) fail(key, "must be positive, got " + std::to_string(v));
    return v;
  }
  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj_[key];
    if (!v.is_number()) fail(key, "expected a number, got " + v.dump());
    const double d = v.get<double>();
    if (!std::isfinite(d)) fail(key, "must be finite");
    return d;
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!obj_[key].is_boolean()) fail(key, "expected true or false, got " + obj_[key].dump());
    return obj_[key].get<bool>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!obj_[key].is_string()) fail(key, "expected a string, got " + obj_[key].dump());
    return obj_[key].get<std::string>();
  }
  std::vector<double> numbers(const char* key) const {
    std::vector<double> out;
    if (!has(key)) return out;
    if (!obj_[key].is_array()) fail(key, "expected a list of numbers");
    for (const json& v : obj_[key]) {
      if (!v.is_number()) fail(key, "expected a list of numbers");
      out.push_back(v.get<double>());
    }
    return out;
  }
  const json& object() const { return obj_; }
  const std::string& file() const { return file_; }

 private:
  const json& obj_;
  std::string file_;
  std::string prefix_;
};

Family family_for(const std::string& arch, const FieldReader& r) {
  if (arch == "LlamaForCausalLM" || arch == "MistralForCausalLM") return Family::Llama;
  if (arch == "Qwen2ForCausalLM") return Family::Qwen2;
  if (arch == "Qwen3ForCausalLM") return Family::Qwen3;
  if (arch == "Gemma3ForCausalLM" || arch == "Gemma3ForConditionalGeneration") return Family::Gemma3;
  if (arch == "Phi3ForCausalLM") return Family::Phi3;
  if (arch == "Qwen3MoeForCausalLM") return Family::Qwen3Moe;
  if (arch == "GptOssForCausalLM") return Family::GptOss;
  if (arch == "Qwen3NextForCausalLM") return Family::Qwen3Next;
  if (arch == "Qwen3_5ForCausalLM" || arch == "Qwen3_5MoeForCausalLM") return Family::Qwen35;
  if (arch.find("Moe") != std::string::npos || arch.find("MoE") != std::string::npos)
    throw Error(ErrorKind::Unsupported, r.file() + ": architecture '" + arch +
                                            "' (mixture of experts) is not supported yet");
  throw Error(ErrorKind::Unsupported,
              r.file() + ": architecture '" + arch +
                  "' is not supported (supported: Llama, Mistral, Qwen2, Qwen3, Gemma3, Phi3, Qwen3-MoE, "
                  "GPT-OSS, Qwen3Next, Qwen3_5, Qwen3_5Moe)");
}

RopeType rope_type_for(const std::string& name, const FieldReader& r) {
  if (name == "default" || name.empty()) return RopeType::Default;
  if (name == "linear") return RopeType::Linear;
  if (name == "dynamic") return RopeType::Dynamic;
  if (name == "yarn") return RopeType::Yarn;
  if (name == "llama3") return RopeType::Llama3;
  if (name == "longrope" || name == "su") return RopeType::LongRope;
  r.fail("rope_type", "unsupported RoPE type '" + name + "'");
}

// Fills the scaling fields of `rope` from a rope_scaling (4.x) or rope_parameters (5.x) object.
void read_rope_scaling(const json& obj, const std::string& file, const std::string& prefix,
                       RopeConfig& rope) {
  const FieldReader r(obj, file, prefix);
  if (!obj.is_object()) r.fail("", "expected an object");
  std::string type = r.string("rope_type", r.string("type", "default"));
  rope.type = rope_type_for(type, r);
  rope.theta = r.number("rope_theta", rope.theta);
  rope.partial_rotary_factor = r.number("partial_rotary_factor", rope.partial_rotary_factor);
  rope.factor = r.number("factor", rope.factor);
  rope.original_max_position = r.integer("original_max_position_embeddings", rope.original_max_position);
  rope.low_freq_factor = r.number("low_freq_factor", rope.low_freq_factor);
  rope.high_freq_factor = r.number("high_freq_factor", rope.high_freq_factor);
  rope.beta_fast = r.number("beta_fast", rope.beta_fast);
  rope.beta_slow = r.number("beta_slow", rope.beta_slow);
  rope.attention_factor = r.number("attention_factor", rope.attention_factor);
  rope.mscale = r.number("mscale", rope.mscale);
  rope.mscale_all_dim = r.number("mscale_all_dim", rope.mscale_all_dim);
  rope.truncate = r.boolean("truncate", rope.truncate);
  if (r.has("long_factor")) rope.long_factor = r.numbers("long_factor");
  if (r.has("short_factor")) rope.short_factor = r.numbers("short_factor");
  if (rope.theta <= 0) r.fail("rope_theta", "must be positive");
  if (rope.factor <= 0) r.fail("factor", "must be positive");
  if (rope.partial_rotary_factor <= 0 || rope.partial_rotary_factor > 1)
    r.fail("partial_rotary_factor", "must be in (0, 1]");
  if (rope.type == RopeType::Llama3 && rope.low_freq_factor >= rope.high_freq_factor)
    r.fail("high_freq_factor", "must exceed low_freq_factor");
}

void read_rope(const FieldReader& r, ModelConfig& c) {
  const json& o = r.object();
  RopeConfig base;
  base.theta = r.number("rope_theta", 10000.0);
  base.partial_rotary_factor = r.number("partial_rotary_factor", 1.0);
  base.original_max_position = r.integer("original_max_position_embeddings", 0);
  c.rope = base;
  if (r.has("rope_parameters")) {
    const json& p = o["rope_parameters"];
    if (p.is_object() && (p.contains("full_attention") || p.contains("sliding_attention"))) {
      // 5.x form keyed by layer type.
      c.rope_sliding = base;
      if (p.contains("full_attention"))
        read_rope_scaling(p["full_attention"], r.file(), "rope_parameters.full_attention.", c.rope);
      if (p.contains("sliding_attention"))
        read_rope_scaling(p["sliding_attention"], r.file(), "rope_parameters.sliding_attention.",
                          c.rope_sliding);
      else
        c.rope_sliding = c.rope;
      return;
    }
    read_rope_scaling(p, r.file(), "rope_parameters.", c.rope);
  } else if (r.has("rope_scaling")) {
    read_rope_scaling(o["rope_scaling"], r.file(), "rope_scaling.", c.rope);
  }
  c.rope_sliding = c.rope;
  if (c.family == Family::Gemma3 && !r.has("rope_parameters")) {
    // 4.x Gemma 3: sliding layers use plain RoPE with rope_local_base_freq.
    c.rope_sliding = RopeConfig{};
    c.rope_sliding.theta = r.number("rope_local_base_freq", 10000.0);
  }
}

void read_layer_types(const FieldReader& r, ModelConfig& c) {
  const json& o = r.object();
  c.layer_is_sliding.assign(c.n_layers, false);
  if (r.has("layer_types")) {
    const json& lt = o["layer_types"];
    if (!lt.is_array() || static_cast<std::int64_t>(lt.size()) != c.n_layers)
      r.fail("layer_types", "expected a list of num_hidden_layers entries");
    for (std::int64_t i = 0; i < c.n_layers; ++i) {
      const std::string t = lt[i].is_string() ? lt[i].get<std::string>() : "";
      if (t == "sliding_attention") c.layer_is_sliding[i] = true;
      else if (t != "full_attention" && !(is_hybrid(c.family) && t == "linear_attention"))
        r.fail("layer_types", "unknown layer type " + lt[i].dump());
    }
  } else if (c.sliding_window > 0) {
    if (c.family == Family::Gemma3) {
      const std::int64_t pattern = r.integer("sliding_window_pattern", r.integer("_sliding_window_pattern", 6));
      if (pattern <= 0) r.fail("sliding_window_pattern", "must be positive");
      for (std::int64_t i = 0; i < c.n_layers; ++i) c.layer_is_sliding[i] = (i + 1) % pattern != 0;
    } else if (c.family == Family::Qwen2 || c.family == Family::Qwen3 || c.family == Family::Qwen3Moe) {
      if (r.boolean("use_sliding_window", false)) {
        const std::int64_t from = r.integer("max_window_layers", c.n_layers);
        for (std::int64_t i = from; i < c.n_layers; ++i) c.layer_is_sliding[i] = true;
      }
    } else {
      c.layer_is_sliding.assign(c.n_layers, true);  // Mistral, Phi-3 with a window
    }
  }
  bool any = false;
  for (bool s : c.layer_is_sliding) any |= s;
  if (any && c.sliding_window <= 0) r.fail("sliding_window", "sliding layers need a positive window");
  if (!any) c.sliding_window = 0;
}

std::vector<std::int32_t> read_eos(const FieldReader& r) {
  std::vector<std::int32_t> ids;
  if (!r.has("eos_token_id")) return ids;
  const json& e = r.object()["eos_token_id"];
  if (e.is_number_integer()) ids.push_back(e.get<std::int32_t>());
  else if (e.is_array())
    for (const json& v : e) {
      if (!v.is_number_integer()) r.fail("eos_token_id", "expected integers");
      ids.push_back(v.get<std::int32_t>());
    }
  else r.fail("eos_token_id", "expected an integer or a list of integers");
  return ids;
}

DType read_dtype(const FieldReader& r) {
  const std::string s = r.string("torch_dtype", r.string("dtype", "float32"));
  if (s == "float32") return DType::F32;
  if (s == "bfloat16") return DType::BF16;
  if (s == "float16") return DType::F16;
  r.fail(r.has("torch_dtype") ? "torch_dtype" : "dtype", "unsupported dtype '" + s + "'");
}

// Qwen3-MoE: experts on layers (l + 1) % decoder_sparse_step == 0 not in mlp_only_layers;
// GPT-OSS: experts on every layer, width intermediate_size, clamped SwiGLU.
void read_moe(const FieldReader& r, ModelConfig& c) {
  MoeConfig& m = c.moe;
  const char* experts_key = r.has("num_local_experts") ? "num_local_experts" : "num_experts";
  m.n_experts = r.positive(experts_key);
  m.top_k = r.positive("num_experts_per_tok");
  if (m.top_k > m.n_experts) r.fail("num_experts_per_tok", "exceeds the number of experts");
  m.layer_is_moe.assign(c.n_layers, true);
  if (c.family == Family::Qwen3Moe) {
    m.inter = r.positive("moe_intermediate_size");
    m.norm_topk_prob = r.boolean("norm_topk_prob", false);
    const std::int64_t step = r.integer("decoder_sparse_step", 1);
    if (step <= 0) r.fail("decoder_sparse_step", "must be positive");
    for (std::int64_t l = 0; l < c.n_layers; ++l) m.layer_is_moe[l] = (l + 1) % step == 0;
    if (r.has("mlp_only_layers")) {
      const json& only = r.object()["mlp_only_layers"];
      if (!only.is_array()) r.fail("mlp_only_layers", "expected a list of layer indices");
      for (const json& v : only) {
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= c.n_layers)
          r.fail("mlp_only_layers", "expected layer indices below num_hidden_layers, got " + v.dump());
        m.layer_is_moe[v.get<std::size_t>()] = false;
      }
    }
  } else {
    m.inter = c.intermediate_size;
    m.swiglu_limit = r.number("swiglu_limit", 7.0);
    if (m.swiglu_limit <= 0) r.fail("swiglu_limit", "must be positive");
  }
}

}  // namespace

std::string_view family_name(Family f) {
  switch (f) {
    case Family::Llama: return "llama";
    case Family::Qwen2: return "qwen2";
    case Family::Qwen3: return "qwen3";
    case Family::Gemma3: return "gemma3";
    case Family::Phi3: return "phi3";
    case Family::Qwen3Moe: return "qwen3_moe";
    case Family::GptOss: return "gpt_oss";
    case Family::Qwen3Next: return "qwen3_next";
    case Family::Qwen35: return "qwen3_5";
  }
  return "?";
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& file_label) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object())
    throw Error(ErrorKind::BadFormat, file_label + ": not a JSON object");
  // Gemma 3 multimodal checkpoints keep the language model under text_config.
  if (root.contains("text_config") && root["text_config"].is_object()) {
    json text = root["text_config"];
    if (!text.contains("architectures")) text["architectures"] = root.value("architectures", json::array());
    root = std::move(text);
  }
  const FieldReader r(root, file_label);
  ModelConfig c;
  if (!r.has("architectures") || !root["architectures"].is_array() || root["architectures"].empty() ||
      !root["architectures"][0].is_string())
    r.fail("architectures", "missing (expected e.g. [\"LlamaForCausalLM\"])");
  c.architecture = root["architectures"][0].get<std::string>();
  c.model_type = r.string("model_type", "");
  c.family = family_for(c.architecture, r);
  const bool moe_family = c.family == Family::Qwen3Moe || c.family == Family::GptOss;
  if (is_hybrid(c.family)) {
    c.hybrid = parse_hybrid_config(root, file_label, r.positive("num_hidden_layers"));
    if (c.family == Family::Qwen35) c.hybrid.moe.norm_topk_prob = true;  // its router always renormalises
  } else if (!moe_family && (r.has("num_experts") || r.has("num_local_experts")))
    throw Error(ErrorKind::Unsupported, file_label + ": mixture-of-experts models are not supported yet");

  c.vocab_size = r.positive("vocab_size");
  c.hidden_size = r.positive("hidden_size");
  // A hybrid MoE may have no dense MLP: size the MLP scratch for its experts instead.
  const SharedExpertMoeConfig& moe = c.hybrid.moe;
  c.intermediate_size = moe.n_experts > 0 && !r.has("intermediate_size")
                            ? std::max(moe.expert_intermediate, moe.shared_intermediate)
                            : r.positive("intermediate_size");
  c.n_layers = r.positive("num_hidden_layers");
  if (moe.n_experts > 0) {  // the hybrids' MoE runs the common MoE block, with its shared expert
    c.moe = {.n_experts = moe.n_experts, .top_k = moe.top_k, .inter = moe.expert_intermediate,
             .norm_topk_prob = moe.norm_topk_prob, .shared_inter = moe.shared_intermediate, .layer_is_moe = {}};
    for (std::int64_t l = 0; l < c.n_layers; ++l) c.moe.layer_is_moe.push_back(moe.layer_is_sparse(l));
  }
  c.n_heads = r.positive("num_attention_heads");
  c.n_kv_heads = r.has("num_key_value_heads") ? r.positive("num_key_value_heads") : c.n_heads;
  if (c.n_heads % c.n_kv_heads != 0)
    r.fail("num_key_value_heads", "must divide num_attention_heads (" + std::to_string(c.n_heads) + ")");
  if (r.has("head_dim")) c.head_dim = r.positive("head_dim");
  else if (c.hidden_size % c.n_heads == 0) c.head_dim = c.hidden_size / c.n_heads;
  else r.fail("head_dim", "missing and hidden_size is not a multiple of num_attention_heads");
  if (c.head_dim % 2 != 0) r.fail("head_dim", "must be even for RoPE");
  c.max_position_embeddings = r.integer("max_position_embeddings", 4096);
  if (c.max_position_embeddings <= 0) r.fail("max_position_embeddings", "must be positive");
  c.rms_norm_eps = r.number("rms_norm_eps", 1e-6);
  if (c.rms_norm_eps <= 0 || c.rms_norm_eps > 1) r.fail("rms_norm_eps", "must be in (0, 1]");
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", c.family == Family::Gemma3);
  c.attention_bias = r.boolean("attention_bias", c.family == Family::Qwen2 || c.family == Family::GptOss);
  c.mlp_bias = r.boolean("mlp_bias", false);

  const std::string act = r.string("hidden_activation", r.string("hidden_act", "silu"));
  if (act == "silu" || act == "swish") c.activation = Activation::Silu;
  else if (act == "gelu_pytorch_tanh" || act == "gelu_tanh") c.activation = Activation::GeluTanh;
  else r.fail(r.has("hidden_activation") ? "hidden_activation" : "hidden_act",
              "unsupported activation '" + act + "'");

  c.sliding_window = r.integer("sliding_window", 0);
  if (c.sliding_window < 0) r.fail("sliding_window", "must not be negative");
  if ((c.family == Family::Qwen2 || c.family == Family::Qwen3 || c.family == Family::Qwen3Moe) &&
      !r.has("layer_types") &&
      !r.boolean("use_sliding_window", false))
    c.sliding_window = 0;
  read_layer_types(r, c);
  read_rope(r, c);

  for (const RopeConfig* rope : {&c.rope, &c.rope_sliding}) {
    if (rope->type != RopeType::LongRope) continue;
    const auto half = static_cast<std::size_t>(
        static_cast<std::int64_t>(static_cast<double>(c.head_dim) * rope->partial_rotary_factor) / 2);
    if (rope->long_factor.size() != half || rope->short_factor.size() != half)
      r.fail("rope_scaling", "longrope long_factor and short_factor need " + std::to_string(half) +
                                 " entries each");
  }

  c.attention_scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  if (c.family == Family::Gemma3) {
    const double q = r.number("query_pre_attn_scalar", static_cast<double>(c.head_dim));
    if (q <= 0) r.fail("query_pre_attn_scalar", "must be positive");
    c.attention_scale = 1.0 / std::sqrt(q);
    c.embedding_multiplier = std::sqrt(static_cast<double>(c.hidden_size));
  }
  c.attn_logit_softcap = r.number("attn_logit_softcapping", 0.0);
  c.final_logit_softcap = r.number("final_logit_softcapping", 0.0);
  if (moe_family) read_moe(r, c);
  c.dtype = read_dtype(r);
  c.bos_token_id = static_cast<std::int32_t>(r.integer("bos_token_id", -1));
  c.eos_token_ids = read_eos(r);
  return c;
}

ModelConfig load_model_config(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  return parse_model_config(read_file_or_throw(path), path);
}

}  // namespace akv
