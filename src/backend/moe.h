// The mixture-of-experts op's contract types (Backend::moe): how experts are picked, their
// activation and weight formats, and the host-side routing and weight decoding every backend's
// result is defined by (the CPU backends call them; the CUDA kernels mirror them).
#pragma once

#include <cstdint>
#include <span>

#include "backend/tensor_ref.h"

namespace akv {

// How an MoE layer turns its router logits [n, n_experts] into k experts and their weights.
enum class MoeGating {
  SoftmaxTopK,  // softmax over all experts, then the top k (Qwen3-MoE), renormalised if asked
  TopKSoftmax,  // the top k logits, then a softmax over those k (GPT-OSS)
};
enum class ExpertActivation {
  Silu,           // silu(gate) * up
  ClampedSwiglu,  // GPT-OSS: g = min(gate, limit), u = clamp(up, -limit, limit),
                  // (u + 1) * g * sigmoid(alpha * g)
};
enum class ExpertFormat {
  Float,  // gate_up and down hold F32, BF16 or F16 rows
  Mxfp4,  // OCP MXFP4 as released in safetensors: `gate_up`/`down` are U8 [rows, cols / 2] of
          // E2M1 pairs (low nibble first), `*_scales` U8 [rows, cols / 32] E8M0 (2^(s - 127))
  GgufBlocks,  // GGUF's quantized rows kept as stored: each of `gate_up` and `down` has a quantized
               // dtype (its block type, quant_blocks.h; the two may differ) and rows of whole
               // blocks, dtype_row_bytes(dtype, cols) bytes each, back to back
};

struct MoeParams {
  std::int64_t n_experts = 0;
  std::int64_t top_k = 0;
  std::int64_t inter = 0;  // width of one expert's hidden layer
  MoeGating gating = MoeGating::SoftmaxTopK;
  bool norm_topk_prob = false;  // SoftmaxTopK: divide the k weights by their sum
  ExpertActivation act = ExpertActivation::Silu;
  float swiglu_limit = 7.0f, swiglu_alpha = 1.702f;  // ClampedSwiglu
  // Rows of an expert's gate_up: false: inter gate rows, then inter up rows; true: alternating
  // (row 2j is gate j, row 2j + 1 up j), as GPT-OSS stores them.
  bool interleaved_gate_up = false;
};

// The experts of one MoE layer, stacked: expert e owns rows [e * r, (e + 1) * r) of each matrix,
// r = 2 * inter for gate_up and hidden for down. `cols` of a weight is its logical width.
struct MoeWeights {
  ExpertFormat format = ExpertFormat::Float;
  WeightRef gate_up = {};         // [n_experts * 2 * inter, hidden]
  WeightRef down = {};            // [n_experts * hidden, inter]
  WeightRef gate_up_scales = {};  // Mxfp4: [n_experts * 2 * inter, hidden / 32]
  WeightRef down_scales = {};     // Mxfp4: [n_experts * hidden, inter / 32]
  WeightRef gate_up_bias = {};    // optional [n_experts, 2 * inter], rows as gate_up
  WeightRef down_bias = {};       // optional [n_experts, hidden]
};

// Caller-owned F32 scratch of one moe call (contents unspecified afterwards).
struct MoeScratch {
  TensorRef route = {};    // [n, 2 * top_k]: expert ids (as floats), then their weights
  TensorRef gate_up = {};  // [n * top_k, 2 * inter]
  TensorRef act = {};      // [n * top_k, inter]
  TensorRef down = {};     // [n * top_k, hidden]
};

// The experts and weights that `gating` picks from one row of router logits: ids[i] and
// weights[i] for i < top_k, best first (ties to the lower id). The weights are computed in
// double; `logits` has n_experts entries.
void route_experts(std::span<const float> logits, const MoeParams& p, std::span<std::int32_t> ids,
                   std::span<float> weights);

// ClampedSwiglu / Silu of one gate/up pair (the per-element rule of ExpertActivation).
float expert_activation(float gate, float up, const MoeParams& p);

// The 16 values of an E2M1 nibble and the value of an E8M0 scale byte (2^(s - 127); 255 is NaN).
float mxfp4_e2m1_value(std::uint8_t nibble);
float mxfp4_scale_value(std::uint8_t e8m0);
// Decodes `n` (a multiple of 32) values of one MXFP4 row: `blocks` n / 2 bytes, `scales` n / 32.
void decode_mxfp4_row(const std::uint8_t* blocks, const std::uint8_t* scales, std::int64_t n,
                      float* out);

// The same `n` values as GGUF MXFP4 blocks (n / 32 blocks of 17 bytes: the E8M0 byte, then value
// j in the low nibble of byte j and value j + 16 in its high nibble) into `out`: dequantize()
// of them equals decode_mxfp4_row (scale 255 aside: NaN here, 2^127 in GGUF). The inverse of
// the GGUF loader's unpacking; the CUDA tests compare the two layouts' kernels with it.
void mxfp4_row_to_gguf_blocks(const std::uint8_t* blocks, const std::uint8_t* scales,
                              std::int64_t n, std::uint8_t* out);

// Row `row` of one stacked expert matrix (`w`, and `scales` for Mxfp4) as f32: w.cols values
// (GgufBlocks: the dequantization oracle's values, tensor/dequantize.h).
void expert_matrix_row(ExpertFormat format, const WeightRef& w, const WeightRef& scales,
                       std::int64_t row, float* out);

// AKV_CHECKs the shapes of a moe call against its contract (Backend::moe).
void check_moe_shapes(TensorRef x, TensorRef router_logits, const MoeWeights& w, const MoeParams& p,
                      const MoeScratch& scratch, TensorRef out);

}  // namespace akv
