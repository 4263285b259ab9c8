// The part every decoder-only family shares: token embedding, the layer loop, final norm, LM
// head (tied or not), logit softcap, RoPE tables per attention kind. A family subclasses it,
// loads its layers and says how one layer runs (block order, norms).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "models/blocks.h"
#include "models/model.h"
#include "models/rope.h"
#include "tensor/safetensors.h"

namespace akv {

class DecoderModel : public Model {
 public:
  const ModelConfig& config() const override { return config_; }
  void forward(const ForwardBatch& batch, KvStorage& kv, std::span<float> logits) override;
  void forward_ids(const ForwardBatch& batch, KvStorage& kv, std::span<const float> temperature,
                   std::span<const double> u, std::span<std::int32_t> ids) override;

 protected:
  // Loads the embedding, final norm and LM head; `norm_offset` is added to norm weights.
  DecoderModel(ModelConfig config, SafetensorsReader reader, Backend& backend, float norm_offset);

  // Updates the residual stream ctx.ws.x [n, hidden] with layer ctx.layer.
  virtual void run_layer(LayerContext& ctx) = 0;
  // Grows a family's own buffers to n token rows; called before the step begins.
  virtual void reserve_extra(std::int64_t n) { (void)n; }

  // The pre-norm residual stream of a layer that runs norm, mixer, norm, MLP. The norm before
  // the mixer first adds layer l - 1's MLP output (still in ws.y) into ws.x, fused, except at
  // layer 0; the one before the MLP adds the mixer's output; finish_layer adds the last layer's
  // MLP output. `offset` is added to the norm weights.
  void norm_before_mixer(LayerContext& ctx, const WeightRef& norm, float offset) {
    const auto eps = static_cast<float>(config_.rms_norm_eps);
    if (ctx.layer == 0)
      backend_.rms_norm(ctx.ws.x, norm, eps, offset, ctx.ws.xn);
    else
      backend_.add_rms_norm(ctx.ws.x, ctx.ws.y, norm, eps, offset, ctx.ws.xn);
  }
  void norm_before_mlp(LayerContext& ctx, const WeightRef& norm, float offset) {
    backend_.add_rms_norm(ctx.ws.x, ctx.ws.y, norm, static_cast<float>(config_.rms_norm_eps), offset,
                          ctx.ws.xn);
  }
  void finish_layer(LayerContext& ctx) {
    if (ctx.layer + 1 == config_.n_layers) backend_.add(ctx.ws.x, ctx.ws.y);
  }

  WeightLoader& loader() { return loader_; }
  const SafetensorsReader& reader() const { return reader_; }
  std::string layer_prefix(std::int64_t layer) const { return "model.layers." + std::to_string(layer) + "."; }

  ModelConfig config_;
  Backend& backend_;
  // False for a family whose ops need the host mid-step (download, upload): no begin_step.
  bool recordable_ = true;
  float norm_offset_;

 private:
  void update_rope(const ForwardBatch& batch);
  // Everything of a forward up to the logits [logit_rows, vocab] in backend memory (no rows if
  // the batch asks for none), inside begin_step(batch, kv, step_key); the caller ends the step.
  TensorRef run_to_logits(const ForwardBatch& batch, KvStorage& kv, const void* step_key);

  SafetensorsReader reader_;  // keeps the mmap alive for zero-copy CPU weights
  WeightLoader loader_;
  WeightRef embed_, final_norm_, lm_head_;
  Workspace ws_;
  std::unique_ptr<DeviceBuffer> last_hidden_, logits_;
  std::int64_t logits_capacity_ = 0;
  char ids_step_key_ = 0;  // its address keys the recorded steps of forward_ids
  RopeFrequencies rope_full_, rope_sliding_;
};

}  // namespace akv
