#include "models/shared_expert_moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace akv {

namespace {

MlpWeights load_expert(WeightLoader& w, const std::string& p, std::int64_t hidden,
                       std::int64_t inter) {
  MlpWeights m;
  m.gate = w.get(p + "gate_proj.weight", {inter, hidden});
  m.up = w.get(p + "up_proj.weight", {inter, hidden});
  m.down = w.get(p + "down_proj.weight", {hidden, inter});
  return m;
}

}  // namespace

SharedExpertMoeWeights load_shared_expert_moe(WeightLoader& w, const std::string& p,
                                              const ModelConfig& c) {
  const SharedExpertMoeConfig& m = c.hybrid.moe;
  SharedExpertMoeWeights s;
  s.router = w.get(p + "gate.weight", {m.n_experts, c.hidden_size});
  for (std::int64_t e = 0; e < m.n_experts; ++e)
    s.experts.push_back(load_expert(w, p + "experts." + std::to_string(e) + ".", c.hidden_size,
                                    m.expert_intermediate));
  s.shared = load_expert(w, p + "shared_expert.", c.hidden_size, m.shared_intermediate);
  s.shared_gate = w.get(p + "shared_expert_gate.weight", {1, c.hidden_size});
  return s;
}

void SharedExpertMoe::reserve(const ModelConfig& c, std::int64_t n) {
  if (n <= capacity_) return;
  const std::int64_t cap = std::max<std::int64_t>(n, 16);
  logits_ =
      backend_.alloc(DType::F32, cap, c.hybrid.moe.n_experts + 1);  // router logits | shared gate
  rows_in_ = backend_.alloc(DType::F32, cap, c.hidden_size);
  rows_out_ = backend_.alloc(DType::F32, cap, c.hidden_size);
  capacity_ = cap;
}

void SharedExpertMoe::run(const SharedExpertMoeWeights& w, const SharedExpertMoeConfig& cfg,
                          LayerContext& ctx, TensorRef xn) {
  Backend& be = backend_;
  const std::int64_t n = xn.rows, hidden = xn.cols, E = cfg.n_experts;
  const auto hsz = static_cast<std::size_t>(hidden);
  const TensorRef logits = logits_->tensor().rows_slice(0, n);
  const MatmulTarget targets[] = {{&w.router, nullptr, logits.cols_slice(0, E)},
                                  {&w.shared_gate, nullptr, logits.cols_slice(E, 1)}};
  be.matmul_multi(xn, targets);
  host_logits_.resize(static_cast<std::size_t>(n * (E + 1)));
  be.download(logits, host_logits_);

  // Route: softmax, top-k, optional renormalisation.
  expert_rows_.assign(static_cast<std::size_t>(E), {});
  expert_weights_.assign(static_cast<std::size_t>(E), {});
  std::vector<double> prob(static_cast<std::size_t>(E));
  std::vector<std::int32_t> order(static_cast<std::size_t>(E));
  for (std::int64_t t = 0; t < n; ++t) {
    const float* l = host_logits_.data() + t * (E + 1);
    const double mx = *std::max_element(l, l + E);
    double sum = 0.0;
    for (std::int64_t e = 0; e < E; ++e) sum += prob[e] = std::exp(l[e] - mx);
    for (double& p : prob) p /= sum;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::int32_t x, std::int32_t y) { return prob[x] > prob[y]; });
    double top = 0.0;
    for (std::int64_t i = 0; i < cfg.top_k; ++i) top += prob[order[i]];
    for (std::int64_t i = 0; i < cfg.top_k; ++i) {
      const std::int32_t e = order[i];
      expert_rows_[e].push_back(static_cast<std::int32_t>(t));
      expert_weights_[e].push_back(
          static_cast<float>(cfg.norm_topk_prob ? prob[e] / top : prob[e]));
    }
  }

  // Shared expert, scaled by its sigmoid gate.
  const auto mlp = [&](TensorRef in, const MlpWeights& m, std::int64_t inter, TensorRef out) {
    const std::int64_t rows = in.rows;
    be.gated_mlp(in, m, GluActivation::Silu,
                 ctx.ws.gate_up.rows_slice(0, rows).cols_slice(0, 2 * inter),
                 ctx.ws.act.rows_slice(0, rows).cols_slice(0, inter), out);
  };
  const TensorRef shared_out = rows_out_->tensor().rows_slice(0, n);
  mlp(xn, w.shared, cfg.shared_intermediate, shared_out);
  acc_.resize(static_cast<std::size_t>(n) * hsz);
  be.download(shared_out, acc_);
  for (std::int64_t t = 0; t < n; ++t) {
    const float g = 1.0f / (1.0f + std::exp(-host_logits_[t * (E + 1) + E]));
    for (std::size_t c = 0; c < hsz; ++c) acc_[t * hsz + c] *= g;
  }

  // Routed experts on their gathered rows.
  for (std::int64_t e = 0; e < E; ++e) {
    const std::vector<std::int32_t>& rows = expert_rows_[e];
    if (rows.empty()) continue;
    const auto m = static_cast<std::int64_t>(rows.size());
    const TensorRef in = rows_in_->tensor().rows_slice(0, m);
    const TensorRef out = rows_out_->tensor().rows_slice(0, m);
    be.gather_rows(xn, rows, in);
    mlp(in, w.experts[e], cfg.expert_intermediate, out);
    host_rows_.resize(static_cast<std::size_t>(m) * hsz);
    be.download(out, host_rows_);
    for (std::int64_t i = 0; i < m; ++i) {
      const float wt = expert_weights_[e][i];
      float* dst = acc_.data() + rows[i] * hsz;
      const float* src = host_rows_.data() + i * hsz;
      for (std::size_t c = 0; c < hsz; ++c) dst[c] += wt * src[c];
    }
  }
  be.upload(acc_, ctx.ws.y);
}

}  // namespace akv
