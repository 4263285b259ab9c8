// The mixture-of-experts block the MoE families share: loading a layer's router and experts from
// the checkpoint layouts (Qwen3-MoE's per-expert matrices, also Qwen3-Next's and Qwen3.5-MoE's
// with their shared expert; GPT-OSS's stacked [in, out] matrices in float or as released in
// MXFP4) into the stacked MoeWeights of Backend::moe, and running it.
#pragma once

#include <string>

#include "backend/backend.h"
#include "models/blocks.h"

namespace akv {

// A SwiGLU expert every token goes through, scaled by sigmoid(x . gate) (Qwen3-Next, Qwen3.5-MoE).
struct SharedExpertWeights {
  MlpWeights mlp;  // gate, up [inter, hidden]; down [hidden, inter]
  WeightRef gate;  // [1, hidden]
  std::int64_t inter = 0;  // 0: no shared expert
};

struct MoeLayerWeights {
  WeightRef router;       // [n_experts, hidden]
  WeightRef router_bias;  // optional [n_experts]
  MoeWeights experts;
  MoeParams params;
  SharedExpertWeights shared;
};

// `prefix` ends in "mlp.". Qwen3-MoE: gate.weight, experts.E.{gate,up,down}_proj.weight, stacked
// into one gate_up (expert e: gate rows, then up rows) and one down, in the checkpoint's dtype;
// quantized experts (GGUF blocks: gate/up of one type, down of its own) as ExpertFormat::GgufBlocks,
// down zero copy when its experts lie back to back (a GGUF stack); quantized experts mixed with
// float ones, or gate and up of different types, dequantized at load to a float dtype.
MoeLayerWeights load_qwen3_moe_experts(WeightLoader& w, const std::string& prefix,
                                       const ModelConfig& c);
// Qwen3-Next / Qwen3.5-MoE: the same experts, plus shared_expert.{gate,up,down}_proj.weight and
// shared_expert_gate.weight (c.moe.shared_inter wide).
MoeLayerWeights load_qwen3_next_moe(WeightLoader& w, const std::string& prefix, const ModelConfig& c);
// GPT-OSS: router.{weight,bias}, experts.{gate_up_proj,down_proj}{,_bias} as float [E, in, out]
// (transposed to [E * out, in] at load), or experts.{gate_up_proj,down_proj}_{blocks,scales} in
// MXFP4 (uploaded as they are). gate/up rows stay interleaved as stored.
MoeLayerWeights load_gpt_oss_experts(WeightLoader& w, const std::string& prefix,
                                     const ModelConfig& c);

// ws.y[n, hidden] = moe(xn): the router matmul, then Backend::moe; with a shared expert, plus
// sigmoid(xn . gate) * shared(xn) (ws.gate_up, ws.act, ws.moe_shared, ws.moe_shared_gate as
// scratch).
void run_moe(const MoeLayerWeights& w, LayerContext& ctx, TensorRef xn);

}  // namespace akv
