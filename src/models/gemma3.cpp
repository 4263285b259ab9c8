// Gemma 3 text: embeddings scaled by sqrt(hidden), norms stored as (multiplier - 1), four norms
// per layer (the block outputs are normed before the residual add), RMSNorm on q/k heads,
// GeGLU (tanh GELU), sliding-window layers with their own RoPE base, optional softcaps.
#include "models/families.h"

#include "models/decoder.h"

namespace akv {

namespace {

struct Gemma3Layer {
  WeightRef input_norm, post_attn_norm, pre_mlp_norm, post_mlp_norm;
  AttentionWeights attn;
  MlpWeights mlp;
};

class Gemma3Model final : public DecoderModel {
 public:
  Gemma3Model(ModelConfig c, SafetensorsReader r, Backend& b)
      : DecoderModel(std::move(c), std::move(r), b, /*norm_offset=*/1.0f) {
    const ModelConfig& cfg = config_;
    for (std::int64_t l = 0; l < cfg.n_layers; ++l) {
      const std::string p = layer_prefix(l);
      Gemma3Layer layer;
      layer.input_norm = loader().get(p + "input_layernorm.weight", {cfg.hidden_size});
      layer.post_attn_norm = loader().get(p + "post_attention_layernorm.weight", {cfg.hidden_size});
      layer.pre_mlp_norm = loader().get(p + "pre_feedforward_layernorm.weight", {cfg.hidden_size});
      layer.post_mlp_norm = loader().get(p + "post_feedforward_layernorm.weight", {cfg.hidden_size});
      layer.attn = load_attention(loader(), p + "self_attn.", cfg,
                                  AttentionLayout{.bias = cfg.attention_bias, .qk_norm = true});
      layer.mlp = load_mlp(loader(), p + "mlp.", cfg, false);
      layers_.push_back(layer);
    }
  }

 private:
  void run_layer(LayerContext& ctx) override {
    const Gemma3Layer& w = layers_[ctx.layer];
    const float eps = static_cast<float>(config_.rms_norm_eps);
    const GluActivation act =
        config_.activation == Activation::GeluTanh ? GluActivation::GeluTanh : GluActivation::Silu;
    backend_.rms_norm(ctx.ws.x, w.input_norm, eps, 1.0f, ctx.ws.xn);
    run_attention(w.attn, ctx, ctx.ws.xn);
    backend_.rms_norm(ctx.ws.y, w.post_attn_norm, eps, 1.0f, ctx.ws.y);
    backend_.add(ctx.ws.x, ctx.ws.y);
    backend_.rms_norm(ctx.ws.x, w.pre_mlp_norm, eps, 1.0f, ctx.ws.xn);
    run_mlp(w.mlp, ctx, ctx.ws.xn, act);
    backend_.rms_norm(ctx.ws.y, w.post_mlp_norm, eps, 1.0f, ctx.ws.y);
    backend_.add(ctx.ws.x, ctx.ws.y);
  }

  std::vector<Gemma3Layer> layers_;
};

}  // namespace

std::unique_ptr<Model> make_gemma3(const ModelConfig& c, SafetensorsReader r, Backend& b) {
  return std::make_unique<Gemma3Model>(c, std::move(r), b);
}

}  // namespace akv
