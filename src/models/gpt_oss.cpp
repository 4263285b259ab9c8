// GPT-OSS (gpt-oss-20b, gpt-oss-120b): attention with q/k/v/o biases and a learned sink logit per
// head, alternating sliding-window and full layers (layer_types), YaRN RoPE; every MLP is a
// mixture of experts: router with bias, top-k then softmax over the chosen, experts with biases
// and the clamped SwiGLU ((up + 1) * gate * sigmoid(1.702 gate), both clamped to swiglu_limit),
// expert weights in float or MXFP4. Block order: x += attn(norm(x)); x += moe(norm(x)).
#include "models/decoder.h"
#include "models/families.h"
#include "models/moe_block.h"

namespace akv {

namespace {

struct GptOssLayer {
  WeightRef attn_norm, mlp_norm;
  AttentionWeights attn;
  MoeLayerWeights experts;
};

class GptOssModel final : public DecoderModel {
 public:
  GptOssModel(ModelConfig c, SafetensorsReader r, Backend& b)
      : DecoderModel(std::move(c), std::move(r), b, /*norm_offset=*/0.0f) {
    const ModelConfig& cfg = config_;
    const AttentionLayout layout{
        .bias = cfg.attention_bias, .o_bias = cfg.attention_bias, .sinks = true};
    for (std::int64_t l = 0; l < cfg.n_layers; ++l) {
      const std::string p = layer_prefix(l);
      GptOssLayer layer;
      layer.attn_norm = loader().get(p + "input_layernorm.weight", {cfg.hidden_size});
      layer.mlp_norm = loader().get(p + "post_attention_layernorm.weight", {cfg.hidden_size});
      layer.attn = load_attention(loader(), p + "self_attn.", cfg, layout);
      layer.experts = load_gpt_oss_experts(loader(), p + "mlp.", cfg);
      layers_.push_back(layer);
    }
  }

 private:
  void run_layer(LayerContext& ctx) override {
    const GptOssLayer& w = layers_[ctx.layer];
    norm_before_mixer(ctx, w.attn_norm, 0.0f);
    run_attention(w.attn, ctx, ctx.ws.xn);
    norm_before_mlp(ctx, w.mlp_norm, 0.0f);
    run_moe(w.experts, ctx, ctx.ws.xn);
    finish_layer(ctx);
  }

  std::vector<GptOssLayer> layers_;
};

}  // namespace

std::unique_ptr<Model> make_gpt_oss(const ModelConfig& c, SafetensorsReader r, Backend& b) {
  return std::make_unique<GptOssModel>(c, std::move(r), b);
}

}  // namespace akv
