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
    const float eps = static_cast<float>(config_.rms_norm_eps);
    // The MLP output of layer l - 1 is still in ws.y: its residual add fuses with this norm.
    if (ctx.layer == 0)
      backend_.rms_norm(ctx.ws.x, w.attn_norm, eps, 0.0f, ctx.ws.xn);
    else
      backend_.add_rms_norm(ctx.ws.x, ctx.ws.y, w.attn_norm, eps, 0.0f, ctx.ws.xn);
    run_attention(w.attn, ctx, ctx.ws.xn);
    backend_.add_rms_norm(ctx.ws.x, ctx.ws.y, w.mlp_norm, eps, 0.0f, ctx.ws.xn);
    run_mlp(w.mlp, ctx, ctx.ws.xn, GluActivation::Silu);
    if (ctx.layer + 1 == config_.n_layers) backend_.add(ctx.ws.x, ctx.ws.y);
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
