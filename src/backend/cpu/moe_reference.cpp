// The scalar MoE op: each token routed on its own, each chosen expert's rows decoded to f32 and
// dotted in double. The oracle of the fast path and the CUDA kernels.
#include <vector>

#include "backend/cpu/host_buffer.h"
#include "backend/cpu/reference_backend.h"

namespace akv {

void ReferenceBackend::moe(TensorRef x, TensorRef router_logits, const MoeWeights& w,
                           const MoeParams& p, const MoeScratch& scratch, TensorRef out) {
  check_moe_shapes(x, router_logits, w, p, scratch, out);
  const std::int64_t hidden = x.cols, inter = p.inter;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(p.top_k));
  std::vector<float> weights(ids.size()), row(static_cast<std::size_t>(std::max(hidden, inter)));
  std::vector<double> gate_up(static_cast<std::size_t>(2 * inter)),
      acc(static_cast<std::size_t>(hidden));
  std::vector<float> act(static_cast<std::size_t>(inter));
  for (std::int64_t t = 0; t < x.rows; ++t) {
    route_experts({router_logits.row<const float>(t), static_cast<std::size_t>(p.n_experts)}, p,
                  ids, weights);
    const float* xr = x.row<const float>(t);
    std::fill(acc.begin(), acc.end(), 0.0);
    for (std::int64_t i = 0; i < p.top_k; ++i) {
      const std::int64_t e = ids[i];
      for (std::int64_t r = 0; r < 2 * inter; ++r) {
        expert_matrix_row(w.format, w.gate_up, w.gate_up_scales, e * 2 * inter + r, row.data());
        double dot = 0.0;
        for (std::int64_t c = 0; c < hidden; ++c) dot += double(xr[c]) * row[c];
        if (!w.gate_up_bias.empty())
          dot += load_f32(w.gate_up_bias.data, w.gate_up_bias.dtype, e * 2 * inter + r);
        gate_up[r] = dot;
      }
      for (std::int64_t j = 0; j < inter; ++j) {
        const double g = p.interleaved_gate_up ? gate_up[2 * j] : gate_up[j];
        const double u = p.interleaved_gate_up ? gate_up[2 * j + 1] : gate_up[inter + j];
        act[j] = expert_activation(static_cast<float>(g), static_cast<float>(u), p);
      }
      for (std::int64_t r = 0; r < hidden; ++r) {
        expert_matrix_row(w.format, w.down, w.down_scales, e * hidden + r, row.data());
        double dot = 0.0;
        for (std::int64_t c = 0; c < inter; ++c) dot += double(act[c]) * row[c];
        if (!w.down_bias.empty())
          dot += load_f32(w.down_bias.data, w.down_bias.dtype, e * hidden + r);
        acc[r] += double(weights[i]) * dot;
      }
    }
    float* yr = out.row<float>(t);
    for (std::int64_t c = 0; c < hidden; ++c) yr[c] = static_cast<float>(acc[c]);
  }
}

}  // namespace akv
