// The Llama layout and its close variants, told apart by config flags and tensor set:
// Llama and SmolLM2 (plain), Mistral (sliding window, from config), Qwen2/2.5 (q/k/v biases),
// Qwen3 (RMSNorm on each q/k head), Phi-3 (fused qkv_proj and gate_up_proj).
// Block order: x += attn(norm(x)); x += mlp(norm(x)).
#include "models/families.h"

#include "models/decoder.h"

namespace akv {

namespace {

struct LlamaLayer {
  WeightRef attn_norm, mlp_norm;  // input_layernorm, post_attention_layernorm
  AttentionWeights attn;
  MlpWeights mlp;
};

class LlamaModel final : public DecoderModel {
 public:
  LlamaModel(ModelConfig c, SafetensorsReader r, Backend& b, const AttentionLayout& layout, bool fused_mlp)
      : DecoderModel(std::move(c), std::move(r), b, /*norm_offset=*/0.0f) {
    const ModelConfig& cfg = config_;
    for (std::int64_t l = 0; l < cfg.n_layers; ++l) {
      const std::string p = layer_prefix(l);
      LlamaLayer layer;
      layer.attn_norm = loader().get(p + "input_layernorm.weight", {cfg.hidden_size});
      layer.mlp_norm = loader().get(p + "post_attention_layernorm.weight", {cfg.hidden_size});
      layer.attn = load_attention(loader(), p + "self_attn.", cfg, layout);
      layer.mlp = load_mlp(loader(), p + "mlp.", cfg, fused_mlp);
      layers_.push_back(layer);
    }
  }

 private:
  void run_layer(LayerContext& ctx) override {
    const LlamaLayer& w = layers_[ctx.layer];
    norm_before_mixer(ctx, w.attn_norm, 0.0f);
    run_attention(w.attn, ctx, ctx.ws.xn);
    norm_before_mlp(ctx, w.mlp_norm, 0.0f);
    run_mlp(w.mlp, ctx, ctx.ws.xn, GluActivation::Silu);
    finish_layer(ctx);
  }

  std::vector<LlamaLayer> layers_;
};

}  // namespace

std::unique_ptr<Model> make_llama(const ModelConfig& c, SafetensorsReader r, Backend& b) {
  return std::make_unique<LlamaModel>(c, std::move(r), b, AttentionLayout{.bias = c.attention_bias}, false);
}

std::unique_ptr<Model> make_qwen3(const ModelConfig& c, SafetensorsReader r, Backend& b) {
  return std::make_unique<LlamaModel>(c, std::move(r), b,
                                      AttentionLayout{.bias = c.attention_bias, .qk_norm = true}, false);
}

std::unique_ptr<Model> make_phi3(const ModelConfig& c, SafetensorsReader r, Backend& b) {
  return std::make_unique<LlamaModel>(c, std::move(r), b, AttentionLayout{.fused_qkv = true}, true);
}

}  // namespace akv
