// The MoE block of Qwen3-Next / Qwen3.5-MoE: softmax router over all experts, top-k (weights
// renormalised when norm_topk_prob), SwiGLU experts, plus a shared SwiGLU expert scaled by
// sigmoid(x . shared_expert_gate).
// A minimal reference version: routing and the weighted sum run on the host through
// download/upload, the experts through gated_mlp on gathered rows. Correct on every backend
// outside recorded steps (so not for CUDA graph decode); to be folded into the general MoE
// ops when they land.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/blocks.h"

namespace akv {

struct SharedExpertMoeWeights {
  WeightRef router;  // [n_experts, hidden]
  std::vector<MlpWeights> experts;
  MlpWeights shared;
  WeightRef shared_gate;  // [1, hidden]
};

SharedExpertMoeWeights load_shared_expert_moe(WeightLoader& w, const std::string& prefix,
                                              const ModelConfig& c);

class SharedExpertMoe {
 public:
  explicit SharedExpertMoe(Backend& backend) : backend_(backend) {}
  // Allocates its buffers for n token rows (before a step begins).
  void reserve(const ModelConfig& c, std::int64_t n);
  // ctx.ws.y[n, hidden] = the MoE block on xn [n, hidden]; uses ctx.ws.gate_up / act as scratch.
  void run(const SharedExpertMoeWeights& w, const SharedExpertMoeConfig& cfg, LayerContext& ctx,
           TensorRef xn);

 private:
  Backend& backend_;
  std::int64_t capacity_ = 0;
  std::unique_ptr<DeviceBuffer> logits_, rows_in_, rows_out_;
  std::vector<float> host_logits_, host_gate_, host_rows_, acc_;
  std::vector<std::vector<std::int32_t>> expert_rows_;
  std::vector<std::vector<float>> expert_weights_;
};

}  // namespace akv
