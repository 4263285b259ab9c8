// Qwen3-MoE (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B): the Qwen3 attention (RMSNorm on each q/k head)
// with a sparse MLP: router softmax over all experts, top-k, optionally renormalised
// (norm_topk_prob); layers in mlp_only_layers or off decoder_sparse_step keep a dense MLP.
// Block order: x += attn(norm(x)); x += mlp_or_moe(norm(x)).
#include "models/decoder.h"
#include "models/families.h"
#include "models/moe_block.h"

namespace akv {

namespace {

struct Qwen3MoeLayer {
  WeightRef attn_norm, mlp_norm;
  AttentionWeights attn;
  bool moe = false;
  MoeLayerWeights experts;  // when moe
  MlpWeights mlp;           // when not
};

class Qwen3MoeModel final : public DecoderModel {
 public:
  Qwen3MoeModel(ModelConfig c, SafetensorsReader r, Backend& b)
      : DecoderModel(std::move(c), std::move(r), b, /*norm_offset=*/0.0f) {
    const ModelConfig& cfg = config_;
    for (std::int64_t l = 0; l < cfg.n_layers; ++l) {
      const std::string p = layer_prefix(l);
      Qwen3MoeLayer layer;
      layer.attn_norm = loader().get(p + "input_layernorm.weight", {cfg.hidden_size});
      layer.mlp_norm = loader().get(p + "post_attention_layernorm.weight", {cfg.hidden_size});
      layer.attn = load_attention(loader(), p + "self_attn.", cfg,
                                  AttentionLayout{.bias = cfg.attention_bias, .qk_norm = true});
      layer.moe = cfg.moe.layer_is_moe[l];
      if (layer.moe)
        layer.experts = load_qwen3_moe_experts(loader(), p + "mlp.", cfg);
      else
        layer.mlp = load_mlp(loader(), p + "mlp.", cfg, false);
      layers_.push_back(layer);
    }
  }

 private:
  void run_layer(LayerContext& ctx) override {
    const Qwen3MoeLayer& w = layers_[ctx.layer];
    norm_before_mixer(ctx, w.attn_norm, 0.0f);
    run_attention(w.attn, ctx, ctx.ws.xn);
    norm_before_mlp(ctx, w.mlp_norm, 0.0f);
    if (w.moe)
      run_moe(w.experts, ctx, ctx.ws.xn);
    else
      run_mlp(w.mlp, ctx, ctx.ws.xn, GluActivation::Silu);
    finish_layer(ctx);
  }

  std::vector<Qwen3MoeLayer> layers_;
};

}  // namespace

std::unique_ptr<Model> make_qwen3_moe(const ModelConfig& c, SafetensorsReader r, Backend& b) {
  return std::make_unique<Qwen3MoeModel>(c, std::move(r), b);
}

}  // namespace akv
