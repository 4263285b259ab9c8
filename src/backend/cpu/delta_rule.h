// The gated delta rule of one (sequence chunk, value head) on host memory, in its two forms:
// token by token (decode; the oracle) and chunked (prefill: within a chunk the updates are
// solved at once through the UT transform, then the state advances once per chunk). Both take
// the prepared per-token inputs (q, k already l2-normalised and q scaled) and equal each other
// up to f32 rounding. Used by the CPU backends; the CUDA kernels follow the same algebra.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/batch.h"
#include "backend/kv_storage.h"

namespace akv {

// One head's inputs over n tokens, row t at t * stride (q, k: k_dim floats; v: v_dim floats).
struct DeltaRuleInputs {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  std::int64_t q_stride = 0, k_stride = 0, v_stride = 0;
  const float* g = nullptr;     // [n] log decay (<= 0), entry t at t * g_stride
  const float* beta = nullptr;  // [n] in (0, 1), likewise
  std::int64_t g_stride = 1;
  std::int64_t n_tokens = 0;
  std::int64_t k_dim = 0, v_dim = 0;
};

// Token by token: S = exp(g) S; S += k (beta (v - S^T k))^T; o = S^T q. `state` [k_dim, v_dim]
// is updated in place; out row t at t * out_stride [v_dim]. Accumulates in double.
void delta_rule_recurrent(const DeltaRuleInputs& in, float* state, float* out,
                          std::int64_t out_stride);

// The same result by chunks of `chunk` tokens, in f32. `scratch` is reused between calls.
void delta_rule_chunked(const DeltaRuleInputs& in, float* state, float* out,
                        std::int64_t out_stride, std::int64_t chunk, std::vector<float>& scratch);

// In-place l2 normalisation of a vector: x / sqrt(sum x^2 + eps), times `scale`.
void l2_normalize(std::span<float> x, float eps, float scale);

// torch's softplus (beta 1, threshold 20).
float softplus(float x);

// The per-token inputs of Backend::gated_delta_rule for a whole batch: q, k [n, key_dim]
// l2-normalised per key head (q also scaled by k_head_dim^-1/2), g, beta [n, n_v_heads].
struct PreparedDeltaRule {
  std::vector<float> q, k, g, beta;
};
void prepare_delta_rule(TensorRef qkv, TensorRef a, TensorRef b, const WeightRef& a_log,
                        const WeightRef& dt_bias, const StateLayout& st, PreparedDeltaRule& p);
// Value head `v_head` of chunk `s` of the prepared batch (v read from qkv).
DeltaRuleInputs delta_rule_inputs(const PreparedDeltaRule& p, TensorRef qkv, const StateLayout& st,
                                  const SequenceChunk& s, std::int64_t v_head);
// The recurrent state [k_head_dim, v_head_dim] of chunk `s`'s slot for `v_head`, zeroed first
// when the chunk starts the sequence.
float* delta_rule_state(const KvStorage& kv, std::int64_t layer, const SequenceChunk& s,
                        std::int64_t v_head);

}  // namespace akv
