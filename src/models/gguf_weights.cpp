// GGUF tensor names and layouts -> checkpoint names and layouts (see gguf_weights.h).
#include "models/gguf_weights.h"

#include <cstring>
#include <functional>

#include "base/check.h"
#include "base/error.h"
#include "models/gguf_expert_weights.h"
#include "models/gguf_hybrid_weights.h"
#include "tensor/dequantize.h"

namespace akv {

namespace {

// Per-layer GGUF tensor stems -> checkpoint stems (under model.layers.N.).
struct LayerName {
  std::string_view gguf, hf;
};
constexpr LayerName kLayerNames[] = {
    {"attn_norm", "input_layernorm"},    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},      {"attn_v", "self_attn.v_proj"},
    {"attn_qkv", "self_attn.qkv_proj"},  {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"}, {"attn_k_norm", "self_attn.k_norm"},
    {"ffn_gate", "mlp.gate_proj"},       {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},       {"ffn_norm", "post_attention_layernorm"},
};
// Gemma 3 names its four norms differently; Phi-3 keeps gate and up fused in ffn_up.
constexpr LayerName kGemma3Names[] = {
    {"post_attention_norm", "post_attention_layernorm"},
    {"ffn_norm", "pre_feedforward_layernorm"},
    {"post_ffw_norm", "post_feedforward_layernorm"},
};
// GPT-OSS's MLP norm is post_attention_norm; its router has a bias. (Sinks: hf_tensor_name.)
constexpr LayerName kGptOssNames[] = {
    {"post_attention_norm", "post_attention_layernorm"},
    {"ffn_gate_inp", "mlp.router"},
};
// Qwen3-Next / Qwen3.5: the MLP norm, the router and the sigmoid-gated shared expert. (Their
// Gated DeltaNet tensors: gguf_hybrid_weights.h.)
constexpr LayerName kHybridNames[] = {
    {"post_attention_norm", "post_attention_layernorm"},
    {"ffn_gate_inp", "mlp.gate"},
    {"ffn_gate_inp_shexp", "mlp.shared_expert_gate"},
    {"ffn_gate_shexp", "mlp.shared_expert.gate_proj"},
    {"ffn_up_shexp", "mlp.shared_expert.up_proj"},
    {"ffn_down_shexp", "mlp.shared_expert.down_proj"},
};

std::optional<std::string_view> layer_stem(std::string_view stem, Family family) {
  if (family == Family::Gemma3)
    for (const LayerName& n : kGemma3Names)
      if (n.gguf == stem) return n.hf;
  if (family == Family::GptOss)
    for (const LayerName& n : kGptOssNames)
      if (n.gguf == stem) return n.hf;
  if (is_hybrid(family)) {
    for (const LayerName& n : kHybridNames)
      if (n.gguf == stem) return n.hf;
    if (is_gguf_linear_attention_stem(stem)) return std::nullopt;  // mapped per layer
  }
  if (family == Family::Qwen3Moe && stem == "ffn_gate_inp") return "mlp.gate";
  if (family == Family::Phi3 && stem == "ffn_up") return "mlp.gate_up_proj";
  for (const LayerName& n : kLayerNames)
    if (n.gguf == stem) return n.hf;
  return std::nullopt;
}

// Undoes the converter's permutation of llama-arch Q/K rows: it stored, within each head of
// `head_dim` rows, row 2i+j of the head at HF row j*(head_dim/2)+i (interleaved rotary pairs).
// Works on whole rows of any type (quantized rows are whole blocks).
std::vector<std::uint8_t> unpermute_rows(std::span<const std::uint8_t> bytes, std::int64_t n_rows,
                                         std::int64_t head_dim) {
  AKV_CHECK(n_rows % head_dim == 0 && head_dim % 2 == 0,
            "unpermute_rows: shape checked by the caller");
  const std::size_t row_bytes = bytes.size() / static_cast<std::size_t>(n_rows);
  std::vector<std::uint8_t> out(bytes.size());
  const std::int64_t half = head_dim / 2;
  for (std::int64_t h = 0; h < n_rows / head_dim; ++h)
    for (std::int64_t i = 0; i < half; ++i)
      for (std::int64_t j = 0; j < 2; ++j) {
        const std::int64_t src = h * head_dim + 2 * i + j;
        const std::int64_t dst = h * head_dim + j * half + i;
        std::memcpy(out.data() + dst * row_bytes, bytes.data() + src * row_bytes, row_bytes);
      }
  return out;
}

// The layer index of a "blk.N." tensor name; nullopt for other names.
std::optional<std::int64_t> gguf_layer(std::string_view name) {
  if (!name.starts_with("blk.")) return std::nullopt;
  const std::size_t dot = name.find('.', 4);
  if (dot == std::string_view::npos || dot == 4) return std::nullopt;
  std::int64_t layer = 0;
  for (const char ch : name.substr(4, dot - 4)) {
    if (ch < '0' || ch > '9' || layer > (std::int64_t{1} << 40)) return std::nullopt;
    layer = layer * 10 + (ch - '0');
  }
  return layer;
}

}  // namespace

std::optional<std::string> hf_tensor_name(std::string_view name, Family family) {
  if (name == "token_embd.weight") return "model.embed_tokens.weight";
  if (name == "output_norm.weight") return "model.norm.weight";
  if (name == "output.weight") return "lm_head.weight";
  if (!name.starts_with("blk.")) return std::nullopt;
  const std::size_t dot = name.find('.', 4);
  if (dot == std::string_view::npos) return std::nullopt;
  const std::string_view layer = name.substr(4, dot - 4);
  if (layer.empty() || layer.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  const std::string_view rest = name.substr(dot + 1);  // "attn_q.weight"
  const std::size_t last = rest.rfind('.');
  if (last == std::string_view::npos) return std::nullopt;
  const std::string_view suffix = rest.substr(last + 1);
  if (suffix != "weight" && suffix != "bias") return std::nullopt;
  // The converter added ".weight" to GPT-OSS's sinks (a bare parameter in the checkpoint).
  if (family == Family::GptOss && rest == "attn_sinks.weight")
    return "model.layers." + std::string(layer) + ".self_attn.sinks";
  const auto stem = layer_stem(rest.substr(0, last), family);
  if (!stem) return std::nullopt;
  return "model.layers." + std::string(layer) + "." + std::string(*stem) + "." +
         std::string(suffix);
}

DType gguf_weight_dtype(const GgufReader& g, DType quantized_dtype) {
  DType out = DType::F32;
  for (const std::string& name : g.names()) {
    const GgufTensor& t = *g.find(name);
    if (t.dims.size() < 2) continue;          // norms and biases stay f32 in every GGUF file
    if (t.type == GgmlType::MXFP4) continue;  // GPT-OSS experts, loaded as they are
    if (ggml_type_traits(t.type).quantized) return quantized_dtype;
    if (const auto d = plain_dtype(t.type); d && *d != DType::F32) out = *d;
  }
  return out;
}

SafetensorsReader weights_from_gguf(std::shared_ptr<const GgufReader> gguf, const ModelConfig& c,
                                    DType dtype, const std::function<bool(DType)>& keep_quantized) {
  const GgufReader& g = *gguf;
  const bool llama_permuted = g.metadata().get_string("general.architecture") == "llama";
  MappedTensors out;
  std::vector<TensorInfo>& tensors = out.tensors;
  std::vector<std::vector<std::uint8_t>>& storage = out.storage;
  const bool hybrid = is_hybrid(c.family);
  for (const std::string& name : g.names()) {
    // Multi-token-prediction blocks follow the decoder's (model_config_from_gguf).
    if (const auto layer = gguf_layer(name); layer && *layer >= c.n_layers) continue;
    const auto hf = hf_tensor_name(name, c.family);
    if (!hf) continue;
    const GgufTensor& t = *g.find(name);
    TensorInfo info{.name = *hf, .dtype = dtype, .shape = t.shape(), .bytes = {}, .file = t.file};
    // The shared expert's gate is one row; llama.cpp's loader also takes it as a vector.
    if (hybrid && name.ends_with(".ffn_gate_inp_shexp.weight") && t.dims.size() == 1)
      info.shape = {1, t.numel()};

    std::span<const std::uint8_t> bytes = t.bytes;
    std::vector<std::uint8_t> unpermuted;
    const bool is_q = name.ends_with(".attn_q.weight") || name.ends_with(".attn_q.bias");
    const bool is_k = name.ends_with(".attn_k.weight") || name.ends_with(".attn_k.bias");
    if (llama_permuted && (is_q || is_k)) {
      const std::int64_t rows = t.shape()[0];
      if (rows != (is_q ? c.n_heads : c.n_kv_heads) * c.head_dim)
        throw Error(ErrorKind::BadFormat, t.file + ": tensor '" + name + "' has " +
                                              std::to_string(rows) +
                                              " rows, expected heads * head_dim");
      unpermuted = unpermute_rows(t.bytes, rows, c.head_dim);
      bytes = unpermuted;
    }
    // The converter stored Gemma's and the hybrids' RMSNorm weights as 1 + w (all but the
    // Gated DeltaNet's gated norm, ssm_norm, which gguf_hybrid_weights maps).
    const bool plus_one_norm =
        (c.family == Family::Gemma3 || hybrid) && name.ends_with("norm.weight");
    const auto stored = plain_dtype(t.type);
    const auto quantized = find_dtype_of(t.type);
    const bool keep_blocks = t.dims.size() == 2 && quantized && dtype_is_quantized(*quantized) &&
                             keep_quantized(*quantized);
    if (keep_blocks) info.dtype = *quantized;
    if ((stored == dtype || keep_blocks) && !plus_one_norm) {
      if (unpermuted.empty()) {
        info.bytes = bytes;  // zero copy from the mapping
      } else {
        storage.push_back(std::move(unpermuted));
        info.bytes = storage.back();
      }
    } else {
      std::vector<float> v(static_cast<std::size_t>(t.numel()));
      dequantize(t.type, bytes, v);
      // The model adds the 1 itself. Where 1 + w >= 0.5 subtracting 1 rounds nothing, so the
      // model's 1 + w is the file's value.
      if (plus_one_norm)
        for (float& x : v) x -= 1.0f;
      storage.push_back(encode_f32(v, dtype));
      info.bytes = storage.back();
    }
    tensors.push_back(std::move(info));
  }
  for (std::int64_t l = 0; l < static_cast<std::int64_t>(c.moe.layer_is_moe.size()); ++l)
    if (c.moe.layer_is_moe[l]) append_gguf_experts(g, c, l, dtype, keep_quantized, out);
  if (hybrid)
    for (std::int64_t l = 0; l < c.n_layers; ++l)
      if (c.hybrid.linear.layer_is_linear[l])
        append_gguf_linear_attention(g, c, l, dtype, keep_quantized, out);
  return SafetensorsReader::from_memory(g.path(), std::move(tensors), std::move(storage),
                                        std::move(gguf));
}

}  // namespace akv
