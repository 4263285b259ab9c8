// The hybrid linear-attention families: Qwen3-Next (fused, per-group interleaved linear-attention
// projections; MoE with a shared expert) and Qwen3.5 text (separate projections; dense MLP, or
// MoE with a shared expert for Qwen3.5-MoE). Layers are Gated DeltaNet or gated full attention
// (config layer_types); every RMSNorm but the DeltaNet's gated one scales by (1 + w).
// Block order: x += mixer(norm(x)); x += mlp(norm(x)).
#include "models/families.h"

#include "models/decoder.h"
#include "models/hybrid_blocks.h"
#include "models/moe_block.h"

namespace akv {

namespace {

struct HybridLayer {
  WeightRef attn_norm, mlp_norm;   // input_layernorm, post_attention_layernorm
  std::int64_t linear_index = -1;  // >= 0: a Gated DeltaNet layer, its index among them
  std::int64_t kv_index = -1;      // >= 0: a full-attention layer, its index among them (KV arrays)
  GatedDeltaNetWeights linear;
  GatedAttentionWeights attn;
  bool sparse = false;
  MlpWeights mlp;
  MoeLayerWeights moe;
};

class HybridModel final : public DecoderModel {
 public:
  HybridModel(ModelConfig c, SafetensorsReader r, Backend& b, bool fused_qkvz)
      : DecoderModel(std::move(c), std::move(r), b, /*norm_offset=*/1.0f),
        derived_(reader(), b),
        hybrid_ws_(b) {
    const ModelConfig& cfg = config_;
    std::int64_t n_linear = 0, n_full = 0;
    for (std::int64_t l = 0; l < cfg.n_layers; ++l) {
      const std::string p = layer_prefix(l);
      HybridLayer layer;
      layer.attn_norm = loader().get(p + "input_layernorm.weight", {cfg.hidden_size});
      layer.mlp_norm = loader().get(p + "post_attention_layernorm.weight", {cfg.hidden_size});
      if (cfg.hybrid.linear.layer_is_linear[l]) {
        layer.linear_index = n_linear++;
        layer.linear = load_gated_delta_net(loader(), derived_, p, cfg, fused_qkvz);
      } else {
        layer.kv_index = n_full++;
        layer.attn = load_gated_attention(loader(), derived_, p, cfg);
      }
      layer.sparse = cfg.moe.n_experts > 0 && cfg.moe.layer_is_moe[l];
      if (layer.sparse)
        layer.moe = load_qwen3_next_moe(loader(), p + "mlp.", cfg);
      else
        layer.mlp = load_mlp(loader(), p + "mlp.", cfg, false);
      layers_.push_back(std::move(layer));
    }
  }

 private:
  void reserve_extra(std::int64_t n) override { hybrid_ws_.reserve(config_, n); }

  void run_layer(LayerContext& ctx) override {
    const HybridLayer& w = layers_[ctx.layer];
    norm_before_mixer(ctx, w.attn_norm, 1.0f);
    if (w.linear_index >= 0)
      run_gated_delta_net(w.linear, ctx, hybrid_ws_, ctx.ws.xn, w.linear_index);
    else
      run_gated_attention(w.attn, ctx, hybrid_ws_, ctx.ws.xn, w.kv_index);
    norm_before_mlp(ctx, w.mlp_norm, 1.0f);
    if (w.sparse)
      run_moe(w.moe, ctx, ctx.ws.xn);
    else
      run_mlp(w.mlp, ctx, ctx.ws.xn, GluActivation::Silu);
    finish_layer(ctx);
  }

  DerivedWeights derived_;
  HybridWorkspace hybrid_ws_;
  std::vector<HybridLayer> layers_;
};

}  // namespace

std::unique_ptr<Model> make_qwen3_next(const ModelConfig& c, SafetensorsReader r, Backend& b) {
  return std::make_unique<HybridModel>(c, std::move(r), b, /*fused_qkvz=*/true);
}

std::unique_ptr<Model> make_qwen3_5(const ModelConfig& c, SafetensorsReader r, Backend& b) {
  return std::make_unique<HybridModel>(c, std::move(r), b, /*fused_qkvz=*/false);
}

}  // namespace akv
