// Shared transformer blocks: the attention block (q/k/v projections, optional biases and
// per-head q/k norms, RoPE, KV append, attention, output projection) and the gated MLP,
// each with fused and unfused weight layouts. Families compose them in their own order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "models/config.h"
#include "models/weight_loader.h"

namespace akv {

struct AttentionWeights {
  WeightRef qkv;                 // fused [(h + 2 kv) * d, hidden] (Phi-3); else q, k, v
  WeightRef q, k, v;             // [h * d, hidden], [kv * d, hidden], [kv * d, hidden]
  WeightRef q_bias, k_bias, v_bias;  // optional [h * d], [kv * d], [kv * d]
  WeightRef q_norm, k_norm;      // optional [d] (Qwen3, Gemma 3)
  WeightRef o;                   // [hidden, h * d]
  WeightRef o_bias;              // optional [hidden] (GPT-OSS)
  WeightRef sinks;               // optional [h] attention sink logits (GPT-OSS)
};

// Fused gate_up (Phi-3) or gate and up apart; the backend's gated_mlp takes them as they are.
using MlpWeights = GatedMlpWeights;

struct AttentionLayout {
  bool fused_qkv = false;
  bool bias = false;
  bool qk_norm = false;
  bool o_bias = false;
  bool sinks = false;
};

AttentionWeights load_attention(WeightLoader& w, const std::string& prefix, const ModelConfig& c,
                                const AttentionLayout& layout);
MlpWeights load_mlp(WeightLoader& w, const std::string& prefix, const ModelConfig& c, bool fused);

// Activation buffers for one forward pass, grown on demand, reused across passes.
class Workspace {
 public:
  explicit Workspace(Backend& backend) : backend_(backend) {}
  // Ensures room for n token rows; returns views sized to exactly n rows.
  void reserve(const ModelConfig& c, std::int64_t n);
  TensorRef x, xn, y;      // [n, hidden] residual stream, normed input, block output
  TensorRef qkv;           // [n, (h + 2 kv) * d]
  TensorRef attn;          // [n, h * d]
  TensorRef gate_up;       // [n, 2 * inter]
  TensorRef act;           // [n, inter]
  TensorRef router;        // MoE models: [n, n_experts] router logits
  MoeScratch moe;          // MoE models: the moe op's scratch for n rows
  TensorRef moe_shared;       // MoE with a shared expert: [n, hidden] its output
  TensorRef moe_shared_gate;  // ... and [n, 1] its gate's logit

 private:
  Backend& backend_;
  std::int64_t capacity_ = 0;
  std::unique_ptr<DeviceBuffer> x_, xn_, y_, qkv_, attn_, gate_up_, act_;
  std::unique_ptr<DeviceBuffer> router_, route_, moe_gate_up_, moe_act_, moe_down_;
  std::unique_ptr<DeviceBuffer> moe_shared_, moe_shared_gate_;
};

// What one layer's attention needs besides its weights.
struct LayerContext {
  Backend& backend;
  const ForwardBatch& batch;
  KvStorage& kv;
  Workspace& ws;
  std::int64_t layer = 0;
  RopeParams rope;
  AttentionParams attention;
  float qk_norm_eps = 1e-6f;
  float norm_offset = 0.0f;  // Gemma stores norm weights as (multiplier - 1)
};

// ws.y[n, hidden] = attention(xn) for the current layer.
void run_attention(const AttentionWeights& w, LayerContext& ctx, TensorRef xn);
// ws.y[n, hidden] = down(act(gate(xn)) * up(xn)).
void run_mlp(const MlpWeights& w, LayerContext& ctx, TensorRef xn, GluActivation act);

}  // namespace akv
