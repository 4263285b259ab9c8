// Random checkpoints per family: tensor list, config.json, and the streaming writer that fills
// each tensor from a counter-based PRNG (splitmix64 of seed, name and element index).
#include "tiny_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/thread_pool.h"

namespace akv {

namespace {

using nlohmann::json;

const char* const kFamilies[] = {"llama",     "mistral", "qwen2", "qwen3",
                                 "qwen3_moe", "gemma3",  "phi3",  "gpt_oss"};

[[noreturn]] void bad_spec(const std::string& what) {
  throw Error(ErrorKind::InvalidArgument, "make_tiny_model: " + what);
}

std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t fnv1a64(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

enum class FillKind {
  Float,       // uniform in [-half_width, half_width), or the constant when half_width is 0
  E2m1Codes,   // U8: two random E2M1 codes a byte (all 16 equally likely)
  E8m0Scales,  // U8: 2^(exponent - 1), 2^exponent or 2^(exponent + 1), equally likely
};

// How one tensor is filled.
struct Fill {
  float half_width = 0;
  float constant = 0;
  FillKind kind = FillKind::Float;
  int exponent = 0;  // E8m0Scales
};

// Uniform with standard deviation 1/sqrt(fan_in): each matmul keeps activations O(1).
Fill matrix_fill(std::int64_t fan_in) {
  return {static_cast<float>(std::sqrt(3.0 / static_cast<double>(fan_in))), 0, FillKind::Float, 0};
}

Fill constant_fill(float value) {
  return {0, value, FillKind::Float, 0};
}

// Scales for random E2M1 codes (root mean square sqrt(68.5 / 8) = 2.93) that give an MXFP4
// matrix of fan_in columns a standard deviation near 1/sqrt(fan_in), as matrix_fill does.
Fill e8m0_scales_fill(std::int64_t fan_in) {
  const double scale = 1.0 / (std::sqrt(68.5 / 8.0) * std::sqrt(static_cast<double>(fan_in)));
  return {0, 0, FillKind::E8m0Scales, static_cast<int>(std::lround(std::log2(scale)))};
}

struct Planned {
  TensorSpec spec;
  Fill fill;
  bool keep_with_next = false;  // the next tensor goes to the same shard
};

// Qwen3-MoE's router and experts in the transformers 4.x layout (one tensor per expert and
// projection), which both agentkv and llama.cpp's converter read.
void add_experts(const std::string& p, std::vector<Planned>& out, const TinyModelSpec& s) {
  const std::int64_t h = s.hidden, w = s.moe.expert_intermediate;
  out.push_back({{p + "mlp.gate.weight", s.dtype, {s.moe.n_experts, h}}, matrix_fill(h), false});
  for (std::int64_t e = 0; e < s.moe.n_experts; ++e) {
    const std::string ep = p + "mlp.experts." + std::to_string(e) + ".";
    out.push_back({{ep + "gate_proj.weight", s.dtype, {w, h}}, matrix_fill(h), false});
    out.push_back({{ep + "up_proj.weight", s.dtype, {w, h}}, matrix_fill(h), false});
    out.push_back({{ep + "down_proj.weight", s.dtype, {h, w}}, matrix_fill(w), false});
  }
}

// Uniform with standard deviation 0.02.
Fill bias_fill() {
  return {0.02f * std::sqrt(3.0f), 0, FillKind::Float, 0};
}

// One MXFP4 projection of GPT-OSS's experts as released: [E, rows, cols] as code blocks and
// their scales (kept in one shard), then the bias [E, rows] in the float dtype.
void add_mxfp4_projection(const std::string& name, std::int64_t rows, std::int64_t cols,
                          std::vector<Planned>& out, const TinyModelSpec& s) {
  const std::int64_t n = s.moe.n_experts, groups = cols / 32;
  out.push_back({{name + "_blocks", DType::U8, {n, rows, groups, 16}},
                 {0, 0, FillKind::E2m1Codes, 0},
                 /*keep_with_next=*/true});
  out.push_back({{name + "_scales", DType::U8, {n, rows, groups}}, e8m0_scales_fill(cols), false});
  out.push_back({{name + "_bias", s.dtype, {n, rows}}, bias_fill(), false});
}

// GPT-OSS's router and experts (names and shapes of transformers' GptOssExperts; gate and up
// rows interleaved in gate_up, which random weights do not show).
void add_gpt_oss_experts(const std::string& p, std::vector<Planned>& out, const TinyModelSpec& s) {
  const std::int64_t h = s.hidden, w = s.intermediate, n = s.moe.n_experts;
  out.push_back({{p + "mlp.router.weight", s.dtype, {n, h}}, matrix_fill(h), false});
  out.push_back({{p + "mlp.router.bias", s.dtype, {n}}, bias_fill(), false});
  const std::string e = p + "mlp.experts.";
  if (s.moe.expert_dtype == DType::MXFP4) {
    add_mxfp4_projection(e + "gate_up_proj", 2 * w, h, out, s);
    add_mxfp4_projection(e + "down_proj", h, w, out, s);
    return;
  }
  const DType t = s.moe.expert_dtype;
  out.push_back({{e + "gate_up_proj", t, {n, h, 2 * w}}, matrix_fill(h), false});  // [E, in, out]
  out.push_back({{e + "gate_up_proj_bias", s.dtype, {n, 2 * w}}, bias_fill(), false});
  out.push_back({{e + "down_proj", t, {n, w, h}}, matrix_fill(w), false});
  out.push_back({{e + "down_proj_bias", s.dtype, {n, h}}, bias_fill(), false});
}

std::vector<Planned> plan_tensors(const TinyModelSpec& s) {
  const std::int64_t h = s.hidden, hd = s.head_dim, q = s.heads * hd, kv = s.kv_heads * hd;
  const bool gemma = s.family == "gemma3", gpt_oss = s.family == "gpt_oss";
  const Fill norm = constant_fill(gemma ? 0.0f : 1.0f);  // Gemma stores RMSNorm weights as (w - 1)
  const Fill bias = bias_fill();
  std::vector<Planned> out;
  auto add = [&](std::string name, std::vector<std::int64_t> shape, Fill fill) {
    out.push_back({{std::move(name), s.dtype, std::move(shape)}, fill, false});
  };

  add("model.embed_tokens.weight", {s.vocab, h}, matrix_fill(h));  // [vocab, hidden]
  for (std::int64_t i = 0; i < s.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {h}, norm);
    if (s.family == "phi3") {
      add(p + "self_attn.qkv_proj.weight", {q + 2 * kv, h}, matrix_fill(h));
    } else {
      add(p + "self_attn.q_proj.weight", {q, h}, matrix_fill(h));
      add(p + "self_attn.k_proj.weight", {kv, h}, matrix_fill(h));
      add(p + "self_attn.v_proj.weight", {kv, h}, matrix_fill(h));
      if (s.family == "qwen2" || gpt_oss) {
        add(p + "self_attn.q_proj.bias", {q}, bias);
        add(p + "self_attn.k_proj.bias", {kv}, bias);
        add(p + "self_attn.v_proj.bias", {kv}, bias);
      }
    }
    add(p + "self_attn.o_proj.weight", {h, q}, matrix_fill(q));
    if (gpt_oss) {
      add(p + "self_attn.o_proj.bias", {h}, bias);
      add(p + "self_attn.sinks", {s.heads}, {1.0f, 0, FillKind::Float, 0});  // logits in [-1, 1)
    }
    if (s.family == "qwen3" || s.family == "qwen3_moe" || gemma) {
      add(p + "self_attn.q_norm.weight", {hd}, norm);
      add(p + "self_attn.k_norm.weight", {hd}, norm);
    }
    add(p + "post_attention_layernorm.weight", {h}, norm);
    if (gemma) {
      add(p + "pre_feedforward_layernorm.weight", {h}, norm);
      add(p + "post_feedforward_layernorm.weight", {h}, norm);
    }
    if (s.family == "qwen3_moe") {
      add_experts(p, out, s);
    } else if (gpt_oss) {
      add_gpt_oss_experts(p, out, s);
    } else if (s.family == "phi3") {
      add(p + "mlp.gate_up_proj.weight", {2 * s.intermediate, h}, matrix_fill(h));
    } else {
      add(p + "mlp.gate_proj.weight", {s.intermediate, h}, matrix_fill(h));
      add(p + "mlp.up_proj.weight", {s.intermediate, h}, matrix_fill(h));
    }
    if (s.family != "qwen3_moe" && !gpt_oss)
      add(p + "mlp.down_proj.weight", {h, s.intermediate}, matrix_fill(s.intermediate));
  }
  add("model.norm.weight", {h}, norm);
  if (!*s.tied) add("lm_head.weight", {s.vocab, h}, matrix_fill(h));
  return out;
}

std::int64_t numel(const TensorSpec& t) {
  std::int64_t n = 1;
  for (std::int64_t d : t.shape) n *= d;
  return n;
}

// Fills elements [first, first + n) of tensor `t` into `out` (n * dtype_size bytes).
void fill_range(const Planned& t, std::uint64_t seed, std::int64_t first, std::int64_t n,
                std::uint8_t* out) {
  const std::uint64_t key = splitmix64(seed ^ fnv1a64(t.spec.name));
  if (t.fill.kind != FillKind::Float) {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint64_t x = splitmix64(key + static_cast<std::uint64_t>(first + i));
      out[i] = t.fill.kind == FillKind::E2m1Codes
                   ? static_cast<std::uint8_t>(x >> 56)
                   : static_cast<std::uint8_t>(127 + t.fill.exponent + static_cast<int>(x % 3) - 1);
    }
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    float v = t.fill.constant;
    if (t.fill.half_width != 0) {
      const std::uint64_t x = splitmix64(key + static_cast<std::uint64_t>(first + i));
      const float u = static_cast<float>(x >> 40) * (1.0f / 8388608.0f) - 1.0f;  // [-1, 1)
      v = u * t.fill.half_width;
    }
    switch (t.spec.dtype) {
      case DType::F32:
        std::memcpy(out + 4 * i, &v, 4);
        break;
      case DType::BF16: {
        const std::uint16_t b = f32_to_bf16(v);
        std::memcpy(out + 2 * i, &b, 2);
        break;
      }
      case DType::F16: {
        const std::uint16_t b = f32_to_f16(v);
        std::memcpy(out + 2 * i, &b, 2);
        break;
      }
      default:
        bad_spec("dtype must be f32, bf16 or f16");
    }
  }
}

void write_shard(const std::string& path, const std::vector<const Planned*>& tensors,
                 std::uint64_t seed, ThreadPool& pool) {
  std::vector<TensorSpec> specs;
  for (const Planned* t : tensors) specs.push_back(t->spec);
  SafetensorsWriter writer(path, std::move(specs), {{"format", "pt"}});
  constexpr std::int64_t kChunkElems = 8 << 20;
  std::vector<std::uint8_t> buf;
  for (const Planned* t : tensors) {
    const std::int64_t n = numel(t->spec);
    const std::size_t esize = dtype_size(t->spec.dtype);
    for (std::int64_t first = 0; first < n; first += kChunkElems) {
      const std::int64_t count = std::min(kChunkElems, n - first);
      buf.resize(static_cast<std::size_t>(count) * esize);
      pool.parallel_for(count, 4096, [&](std::int64_t b, std::int64_t e) {
        fill_range(*t, seed, first + b, e - b, buf.data() + b * esize);
      });
      writer.append(buf);
    }
  }
  writer.commit();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw Error(ErrorKind::Io, path + ": cannot write");
}

// Removes a checkpoint of the other layout, so the reader does not pick up a stale one.
void remove_old_checkpoint(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool shard = name.starts_with("model-") && name.ends_with(".safetensors");
    if (shard || name == "model.safetensors" || name == "model.safetensors.index.json")
      fs::remove(e.path(), ec);
  }
}

const char* torch_dtype(DType t) {
  return t == DType::BF16 ? "bfloat16" : t == DType::F16 ? "float16" : "float32";
}

}  // namespace

void apply_tiny_model_preset(const std::string& preset, TinyModelSpec& s) {
  if (preset == "smollm2-135m") {
    s.family = "llama";
    s.hidden = 576, s.intermediate = 1536, s.layers = 30, s.heads = 9, s.kv_heads = 3;
    s.head_dim = 64, s.vocab = 49152, s.tied = true, s.rope_theta = 100000.0;
    s.max_position_embeddings = 8192, s.bos_token_id = 0, s.eos_token_id = 0;
  } else if (preset == "llama3-8b") {
    s.family = "llama";
    s.hidden = 4096, s.intermediate = 14336, s.layers = 32, s.heads = 32, s.kv_heads = 8;
    s.head_dim = 128, s.vocab = 128256, s.tied = false, s.rope_theta = 500000.0;
    s.rope_scaling = Llama3RopeScaling{8.0, 1.0, 4.0, 8192};
    s.max_position_embeddings = 131072, s.bos_token_id = 128000, s.eos_token_id = 128001;
  } else if (preset == "qwen3-30b-a3b") {
    s.family = "qwen3_moe";
    s.hidden = 2048, s.intermediate = 6144, s.layers = 48, s.heads = 32, s.kv_heads = 4;
    s.head_dim = 128, s.vocab = 151936, s.tied = false, s.rope_theta = 1000000.0;
    s.moe = {.n_experts = 128, .top_k = 8, .expert_intermediate = 768};
    s.max_position_embeddings = 40960, s.bos_token_id = 151643, s.eos_token_id = 151645;
  } else if (preset == "gpt-oss-20b") {
    s.family = "gpt_oss";
    s.hidden = 2880, s.intermediate = 2880, s.layers = 24, s.heads = 64, s.kv_heads = 8;
    s.head_dim = 64, s.vocab = 201088, s.tied = false, s.rope_theta = 150000.0;
    s.moe.n_experts = 32, s.moe.top_k = 4, s.moe.expert_dtype = DType::MXFP4;
    s.yarn = YarnRopeScaling{32.0, 4096, 32.0, 1.0};
    s.sliding_window = 128, s.max_position_embeddings = 131072;
    s.bos_token_id = 199998, s.eos_token_id = 200002, s.pad_token_id = 199999;
  } else {
    bad_spec("unknown preset '" + preset +
             "' (smollm2-135m, llama3-8b, qwen3-30b-a3b, gpt-oss-20b)");
  }
}

TinyModelSpec resolve_tiny_model_spec(const TinyModelSpec& in) {
  TinyModelSpec s = in;
  if (std::find(std::begin(kFamilies), std::end(kFamilies), s.family) == std::end(kFamilies))
    bad_spec("unknown family '" + s.family +
             "' (llama, mistral, qwen2, qwen3, qwen3_moe, gemma3, phi3, gpt_oss)");
  for (auto [name, v] : {std::pair{"hidden", s.hidden},
                         {"intermediate", s.intermediate},
                         {"layers", s.layers},
                         {"heads", s.heads},
                         {"kv-heads", s.kv_heads},
                         {"vocab", s.vocab},
                         {"max-position-embeddings", s.max_position_embeddings}})
    if (v <= 0) bad_spec(std::string(name) + " must be positive");
  if (s.head_dim < 0) bad_spec("head-dim must not be negative");
  if (s.family == "qwen3_moe" || s.family == "gpt_oss") {
    if (s.moe.n_experts <= 0 || s.moe.expert_intermediate <= 0)
      bad_spec("experts and expert-intermediate must be positive");
    if (s.moe.top_k <= 0 || s.moe.top_k > s.moe.n_experts)
      bad_spec("experts-per-token must be in [1, experts]");
  }
  if (s.family == "gpt_oss") {
    const DType e = s.moe.expert_dtype;
    if (e != DType::MXFP4 && e != DType::F32 && e != DType::BF16 && e != DType::F16)
      bad_spec("expert-dtype must be mxfp4, f32, bf16 or f16");
    if (e == DType::MXFP4 && (s.hidden % 32 != 0 || s.intermediate % 32 != 0))
      bad_spec("MXFP4 experts need hidden and intermediate multiples of 32 (or expert-dtype bf16)");
    if (s.yarn.factor <= 0 || s.yarn.original_max_position_embeddings <= 0)
      bad_spec("yarn factor and original_max_position_embeddings must be positive");
  }
  if (s.heads % s.kv_heads != 0) bad_spec("heads must be a multiple of kv-heads");
  if (s.head_dim == 0) {
    if (s.hidden % s.heads != 0) bad_spec("hidden must be a multiple of heads (or give head-dim)");
    s.head_dim = s.hidden / s.heads;
  }
  if (s.family == "phi3" && s.head_dim * s.heads != s.hidden)
    bad_spec("phi3 needs head-dim * heads == hidden");
  if (s.dtype != DType::F32 && s.dtype != DType::BF16 && s.dtype != DType::F16)
    bad_spec("dtype must be f32, bf16 or f16");
  if (std::max(s.bos_token_id, s.eos_token_id) >= s.vocab) bad_spec("bos/eos id past the vocab");
  if (s.rope_scaling && s.family != "llama") bad_spec("rope scaling is only written for llama");
  if (!s.tied) s.tied = s.family == "gemma3";
  if (!s.rope_theta)
    s.rope_theta = (s.family == "llama" || s.family == "phi3") ? 10000.0
                   : s.family == "gpt_oss"                     ? 150000.0
                                                               : 1000000.0;
  if (!s.sliding_window)
    s.sliding_window = s.family == "gemma3" ? 512 : s.family == "gpt_oss" ? 128 : 4096;
  if (*s.sliding_window <= 0) bad_spec("sliding-window must be positive");
  return s;
}

std::vector<TensorSpec> tiny_model_tensors(const TinyModelSpec& resolved) {
  std::vector<TensorSpec> out;
  for (Planned& p : plan_tensors(resolved)) out.push_back(std::move(p.spec));
  return out;
}

std::uint64_t tiny_model_parameters(const TinyModelSpec& resolved) {
  std::uint64_t total = 0;
  for (const Planned& p : plan_tensors(resolved)) {
    std::uint64_t n = 1;
    for (std::int64_t d : p.spec.shape) n *= static_cast<std::uint64_t>(d);
    if (p.fill.kind == FillKind::E2m1Codes) total += 2 * n;
    if (p.fill.kind == FillKind::Float) total += n;
  }
  return total;
}

namespace {

// GPT-OSS's fields in the form of the released gpt-oss-20b config.json (transformers 4.55).
void add_gpt_oss_fields(const TinyModelSpec& s, json& c) {
  json layer_types = json::array();
  for (std::int64_t l = 0; l < s.layers; ++l)
    layer_types.push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
  c["attention_bias"] = true, c["layer_types"] = layer_types;
  c["sliding_window"] = *s.sliding_window;
  c["num_local_experts"] = s.moe.n_experts, c["num_experts_per_tok"] = s.moe.top_k;
  c["experts_per_token"] = s.moe.top_k, c["swiglu_limit"] = 7.0;
  c["initial_context_length"] = s.yarn.original_max_position_embeddings;
  c["rope_scaling"] = {
      {"rope_type", "yarn"},
      {"factor", s.yarn.factor},
      {"original_max_position_embeddings", s.yarn.original_max_position_embeddings},
      {"beta_fast", s.yarn.beta_fast},
      {"beta_slow", s.yarn.beta_slow},
      {"truncate", false}};
  c["pad_token_id"] = s.pad_token_id.value_or(0);
  c["output_router_logits"] = false, c["router_aux_loss_coef"] = 0.9;
  c["transformers_version"] = "4.55.0";
  // llama.cpp's converter keeps the experts in MXFP4 only when the config says so.
  if (s.moe.expert_dtype == DType::MXFP4)
    c["quantization_config"] = {{"quant_method", "mxfp4"},
                                {"modules_to_not_convert",
                                 {"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                  "model.embed_tokens", "lm_head"}}};
}

}  // namespace

std::string tiny_model_config_json(const TinyModelSpec& s) {
  static const std::map<std::string, std::pair<const char*, const char*>> kArch = {
      {"llama", {"LlamaForCausalLM", "llama"}},
      {"mistral", {"MistralForCausalLM", "mistral"}},
      {"qwen2", {"Qwen2ForCausalLM", "qwen2"}},
      {"qwen3", {"Qwen3ForCausalLM", "qwen3"}},
      {"qwen3_moe", {"Qwen3MoeForCausalLM", "qwen3_moe"}},
      {"gemma3", {"Gemma3ForCausalLM", "gemma3_text"}},
      {"phi3", {"Phi3ForCausalLM", "phi3"}},
      {"gpt_oss", {"GptOssForCausalLM", "gpt_oss"}},
  };
  const auto& [arch, model_type] = kArch.at(s.family);
  json c = {
      {"architectures", {arch}},
      {"model_type", model_type},
      {"hidden_size", s.hidden},
      {"intermediate_size", s.intermediate},
      {"num_hidden_layers", s.layers},
      {"num_attention_heads", s.heads},
      {"num_key_value_heads", s.kv_heads},
      {"vocab_size", s.vocab},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", *s.rope_theta},
      {"rope_scaling", nullptr},
      {"max_position_embeddings", s.max_position_embeddings},
      {"tie_word_embeddings", *s.tied},
      {"torch_dtype", torch_dtype(s.dtype)},
      {"bos_token_id", s.bos_token_id},
      {"eos_token_id", s.eos_token_id},
      {"hidden_act", "silu"},
      {"attention_dropout", 0.0},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"transformers_version", "4.51.0"},
  };
  if (s.family != "phi3") c["head_dim"] = s.head_dim;  // Phi3Config derives it
  if (s.family == "llama") {
    c["attention_bias"] = false, c["mlp_bias"] = false, c["pretraining_tp"] = 1;
    if (s.rope_scaling)
      c["rope_scaling"] = {
          {"rope_type", "llama3"},
          {"factor", s.rope_scaling->factor},
          {"low_freq_factor", s.rope_scaling->low_freq_factor},
          {"high_freq_factor", s.rope_scaling->high_freq_factor},
          {"original_max_position_embeddings", s.rope_scaling->original_max_position_embeddings}};
  } else if (s.family == "mistral") {
    c["sliding_window"] = *s.sliding_window;
  } else if (s.family == "qwen2" || s.family == "qwen3" || s.family == "qwen3_moe") {
    c["rms_norm_eps"] = 1e-6, c["use_sliding_window"] = false;
    c["sliding_window"] = nullptr, c["max_window_layers"] = s.layers;
    if (s.family != "qwen2") c["attention_bias"] = false;
    if (s.family == "qwen3_moe") {
      c["num_experts"] = s.moe.n_experts, c["num_experts_per_tok"] = s.moe.top_k;
      c["moe_intermediate_size"] = s.moe.expert_intermediate, c["norm_topk_prob"] = true;
      c["decoder_sparse_step"] = 1, c["mlp_only_layers"] = json::array();
      c["output_router_logits"] = false, c["router_aux_loss_coef"] = 0.001;
    }
  } else if (s.family == "gemma3") {
    c.erase("hidden_act");
    c["hidden_activation"] = "gelu_pytorch_tanh", c["rms_norm_eps"] = 1e-6;
    c["sliding_window"] = *s.sliding_window, c["sliding_window_pattern"] = 6;
    c["rope_local_base_freq"] = 10000.0, c["query_pre_attn_scalar"] = s.head_dim;
    c["final_logit_softcapping"] = nullptr, c["attn_logit_softcapping"] = nullptr;
    c["attention_bias"] = false, c["pad_token_id"] = 0;
  } else if (s.family == "phi3") {
    c["original_max_position_embeddings"] = s.max_position_embeddings;
    c["sliding_window"] = nullptr, c["pad_token_id"] = 0;
    c["embd_pdrop"] = 0.0, c["resid_pdrop"] = 0.0;
  } else if (s.family == "gpt_oss") {
    add_gpt_oss_fields(s, c);
  }
  return c.dump(2) + "\n";
}

void write_tiny_model(const TinyModelSpec& spec, const std::string& dir) {
  const TinyModelSpec s = resolve_tiny_model_spec(spec);
  const std::vector<Planned> tensors = plan_tensors(s);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(ErrorKind::Io, dir + ": cannot create directory: " + ec.message());
  remove_old_checkpoint(dir);
  write_text(dir + "/config.json", tiny_model_config_json(s));

  // Greedy split in file order, as transformers' save_pretrained does.
  // A tensor kept with the next one splits with it as a unit.
  auto bytes_of = [](const Planned& t) {
    return static_cast<std::uint64_t>(numel(t.spec)) * dtype_size(t.spec.dtype);
  };
  std::vector<std::vector<const Planned*>> shards(1);
  std::uint64_t shard_bytes = 0, total_bytes = 0;
  for (std::size_t i = 0; i < tensors.size();) {
    std::size_t end = i + 1;
    std::uint64_t n = bytes_of(tensors[i]);
    while (tensors[end - 1].keep_with_next && end < tensors.size()) n += bytes_of(tensors[end++]);
    if (!shards.back().empty() && shard_bytes + n > s.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    for (; i < end; ++i) shards.back().push_back(&tensors[i]);
    shard_bytes += n;
    total_bytes += n;
  }

  ThreadPool pool;
  if (shards.size() == 1) {
    write_shard(dir + "/model.safetensors", shards[0], s.seed, pool);
    return;
  }
  json weight_map = json::object();
  for (std::size_t k = 0; k < shards.size(); ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
    write_shard(dir + "/" + name, shards[k], s.seed, pool);
    for (const Planned* t : shards[k]) weight_map[t->spec.name] = name;
  }
  const json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
  write_text(dir + "/model.safetensors.index.json", index.dump(2) + "\n");
}

}  // namespace akv
