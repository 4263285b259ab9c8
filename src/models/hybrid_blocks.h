// The token mixers of hybrid linear-attention models (Qwen3-Next, Qwen3.5):
//   - the Gated DeltaNet layer: in_proj -> [q | k | v] short causal conv + SiLU -> gated delta
//     rule with the sequence's recurrent state -> per-head RMSNorm gated by SiLU(z) -> out_proj;
//   - gated full attention: q_proj gives q and an output gate per head; RMSNorm (1 + w) on q/k
//     heads, partial RoPE, paged KV attention, output * sigmoid(gate) -> o_proj.
// Checkpoint layouts differ (Qwen3-Next fuses and interleaves the projections per key-head
// group); loading undoes that, so both families run the same code.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "models/blocks.h"
#include "models/derived_weights.h"
#include "models/model.h"

namespace akv {

struct GatedDeltaNetWeights {
  WeightRef qkv, z, b, a;    // in projections [C, hidden], [vd, hidden], [nv, hidden], [nv, hidden]
  WeightRef conv;            // [C, conv_kernel] depthwise, C = 2 * key_dim + vd
  WeightRef a_log, dt_bias;  // [nv]
  WeightRef norm;            // [v_head_dim], plain weight (no +1)
  WeightRef out;             // [hidden, vd]
};

struct GatedAttentionWeights {
  WeightRef q, gate, k, v;   // [h * d, hidden] x2, [kv * d, hidden] x2
  WeightRef q_norm, k_norm;  // [d], applied as (1 + w)
  WeightRef o;               // [hidden, h * d]
};

// Loads `prefix` + "linear_attn." in either checkpoint layout (fused_qkvz: Qwen3-Next's
// in_proj_qkvz / in_proj_ba, unless the weights have Qwen3.5's separate in_proj_qkv, in_proj_z,
// in_proj_b and in_proj_a, as Qwen3-Next GGUF files give).
GatedDeltaNetWeights load_gated_delta_net(WeightLoader& w, DerivedWeights& d,
                                          const std::string& prefix, const ModelConfig& c,
                                          bool fused_qkvz);
GatedAttentionWeights load_gated_attention(WeightLoader& w, DerivedWeights& d,
                                           const std::string& prefix, const ModelConfig& c);

// Activation buffers the hybrid blocks need besides Workspace.
class HybridWorkspace {
 public:
  explicit HybridWorkspace(Backend& backend) : backend_(backend) {}
  void reserve(const ModelConfig& c, std::int64_t n);
  TensorRef proj;  // [n, C + vd + 2 nv]: [q | k | v] (conv in place), z, b, a
  TensorRef core;  // [n, vd] delta-rule output
  TensorRef gate;  // [n, h * d] attention output gate

 private:
  Backend& backend_;
  std::int64_t capacity_ = 0;
  std::unique_ptr<DeviceBuffer> proj_, core_, gate_;
};

// ws.y[n, hidden] = the Gated DeltaNet layer on xn; `linear_layer` indexes the state arrays.
void run_gated_delta_net(const GatedDeltaNetWeights& w, LayerContext& ctx, HybridWorkspace& hw,
                         TensorRef xn, std::int64_t linear_layer);
// ws.y[n, hidden] = gated attention on xn; `kv_layer` indexes the KV arrays (which hold the
// full-attention layers only: kv_layout_for).
void run_gated_attention(const GatedAttentionWeights& w, LayerContext& ctx, HybridWorkspace& hw,
                         TensorRef xn, std::int64_t kv_layer);

}  // namespace akv
