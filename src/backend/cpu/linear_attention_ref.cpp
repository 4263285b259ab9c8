// The reference backend's ops for hybrid models: the attention output gate, the short causal
// convolution and the gated delta rule (token by token, accumulated in double: the oracle).
#include <algorithm>
#include <cmath>

#include "backend/cpu/delta_rule.h"
#include "backend/cpu/host_buffer.h"
#include "backend/cpu/reference_backend.h"

namespace akv {

void ReferenceBackend::sigmoid_mul(TensorRef x, TensorRef gate) {
  AKV_CHECK(x.rows == gate.rows && (x.cols == gate.cols || gate.cols == 1), "sigmoid_mul shape");
  const std::int64_t step = gate.cols == 1 ? 0 : 1;  // one gate per row
  for (std::int64_t r = 0; r < x.rows; ++r) {
    float* xr = x.row<float>(r);
    const float* g = gate.row<float>(r);
    for (std::int64_t c = 0; c < x.cols; ++c)
      xr[c] = static_cast<float>(xr[c] / (1.0 + std::exp(-double(g[c * step]))));
  }
}

void ReferenceBackend::causal_conv1d(TensorRef x, const WeightRef& w, KvStorage& kv,
                                     std::int64_t layer, const ForwardBatch& batch) {
  const StateLayout& st = kv.state;
  const std::int64_t C = st.conv_channels, R = st.conv_rows, K = R + 1;
  AKV_CHECK(x.cols == C && w.rows == C && w.cols == K && layer >= 0 && layer < st.n_layers,
            "causal_conv1d shape");
  const TensorRef& conv = kv.conv_state[layer];
  std::vector<float> ext;  // [R + n_tokens, C]: the state rows, then the chunk's inputs
  for (const SequenceChunk& s : batch.sequences) {
    AKV_CHECK(s.state_slot >= 0 && s.state_slot < st.n_slots, "state slot out of range");
    ext.assign(static_cast<std::size_t>((R + s.n_tokens) * C), 0.0f);
    for (std::int64_t r = 0; r < R && s.start_pos > 0; ++r)
      std::copy_n(conv.row<float>(s.state_slot * R + r), C, ext.begin() + r * C);
    for (std::int32_t t = 0; t < s.n_tokens; ++t)
      std::copy_n(x.row<float>(s.first_row + t), C, ext.begin() + (R + t) * C);
    for (std::int32_t t = 0; t < s.n_tokens; ++t) {
      float* y = x.row<float>(s.first_row + t);
      for (std::int64_t c = 0; c < C; ++c) {
        double acc = 0.0;
        for (std::int64_t j = 0; j < K; ++j)
          acc += double(ext[(t + j) * C + c]) * load_f32(w.data, w.dtype, c * K + j);
        y[c] = silu(static_cast<float>(acc));
      }
    }
    for (std::int64_t r = 0; r < R; ++r)
      std::copy_n(ext.begin() + (s.n_tokens + r) * C, C, conv.row<float>(s.state_slot * R + r));
  }
}

void ReferenceBackend::gated_delta_rule(TensorRef qkv, TensorRef a, TensorRef b,
                                        const WeightRef& a_log, const WeightRef& dt_bias,
                                        KvStorage& kv, std::int64_t layer,
                                        const ForwardBatch& batch, TensorRef out) {
  const StateLayout& st = kv.state;
  AKV_CHECK(out.rows == qkv.rows && out.cols == st.n_v_heads * st.v_head_dim,
            "gated_delta_rule out shape");
  PreparedDeltaRule p;
  prepare_delta_rule(qkv, a, b, a_log, dt_bias, st, p);
  for (const SequenceChunk& s : batch.sequences)
    for (std::int64_t h = 0; h < st.n_v_heads; ++h)
      delta_rule_recurrent(delta_rule_inputs(p, qkv, st, s, h), delta_rule_state(kv, layer, s, h),
                           out.row<float>(s.first_row) + h * st.v_head_dim, out.stride);
}

}  // namespace akv
