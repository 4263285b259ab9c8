#include "models/hybrid_blocks.h"

#include <algorithm>

namespace akv {

GatedDeltaNetWeights load_gated_delta_net(WeightLoader& w, DerivedWeights& d,
                                          const std::string& prefix, const ModelConfig& c,
                                          bool fused_qkvz) {
  const LinearAttentionConfig& la = c.hybrid.linear;
  const std::int64_t nk = la.n_k_heads, nv = la.n_v_heads, dk = la.k_head_dim, dv = la.v_head_dim;
  const std::int64_t C = la.conv_channels(), vd = la.value_dim(), H = c.hidden_size;
  const std::string p = prefix + "linear_attn.";
  GatedDeltaNetWeights g;
  // A Qwen3-Next GGUF file carries the separate projections (gguf_hybrid_weights.h).
  if (fused_qkvz && !w.has(p + "in_proj_qkv.weight")) {
    // Per key-head group: [q dk | k dk | v r*dv | z r*dv] and [b r | a r], r = nv / nk.
    const std::int64_t r = nv / nk, group = 2 * dk + 2 * r * dv;
    std::vector<std::int64_t> q, k, v, z, b, a;
    for (std::int64_t i = 0; i < nk; ++i) {
      for (std::int64_t j = 0; j < dk; ++j)
        q.push_back(i * group + j), k.push_back(i * group + dk + j);
      for (std::int64_t j = 0; j < r * dv; ++j)
        v.push_back(i * group + 2 * dk + j), z.push_back(i * group + 2 * dk + r * dv + j);
      for (std::int64_t j = 0; j < r; ++j)
        b.push_back(i * 2 * r + j), a.push_back(i * 2 * r + r + j);
    }
    std::vector<std::int64_t> qkv = q;
    qkv.insert(qkv.end(), k.begin(), k.end());
    qkv.insert(qkv.end(), v.begin(), v.end());
    g.qkv = d.rows_of(p + "in_proj_qkvz.weight", {C + vd, H}, qkv);
    g.z = d.rows_of(p + "in_proj_qkvz.weight", {C + vd, H}, z);
    g.b = d.rows_of(p + "in_proj_ba.weight", {2 * nv, H}, b);
    g.a = d.rows_of(p + "in_proj_ba.weight", {2 * nv, H}, a);
  } else {
    g.qkv = w.get(p + "in_proj_qkv.weight", {C, H});
    g.z = w.get(p + "in_proj_z.weight", {vd, H});
    g.b = w.get(p + "in_proj_b.weight", {nv, H});
    g.a = w.get(p + "in_proj_a.weight", {nv, H});
  }
  g.conv = d.as_matrix(p + "conv1d.weight", {C, 1, la.conv_kernel});
  g.a_log = w.get(p + "A_log", {nv});
  g.dt_bias = w.get(p + "dt_bias", {nv});
  g.norm = w.get(p + "norm.weight", {dv});
  g.out = w.get(p + "out_proj.weight", {H, vd});
  return g;
}

GatedAttentionWeights load_gated_attention(WeightLoader& w, DerivedWeights& d,
                                           const std::string& prefix, const ModelConfig& c) {
  const std::int64_t h = c.n_heads, hd = c.head_dim, H = c.hidden_size;
  const std::string p = prefix + "self_attn.";
  // q_proj rows per head: [q hd | gate hd].
  std::vector<std::int64_t> q, gate;
  for (std::int64_t i = 0; i < h; ++i)
    for (std::int64_t j = 0; j < hd; ++j)
      q.push_back(i * 2 * hd + j), gate.push_back(i * 2 * hd + hd + j);
  GatedAttentionWeights a;
  a.q = d.rows_of(p + "q_proj.weight", {2 * h * hd, H}, q);
  a.gate = d.rows_of(p + "q_proj.weight", {2 * h * hd, H}, gate);
  a.k = w.get(p + "k_proj.weight", {c.n_kv_heads * hd, H});
  a.v = w.get(p + "v_proj.weight", {c.n_kv_heads * hd, H});
  a.q_norm = w.get(p + "q_norm.weight", {hd});
  a.k_norm = w.get(p + "k_norm.weight", {hd});
  a.o = w.get(p + "o_proj.weight", {H, h * hd});
  return a;
}

void HybridWorkspace::reserve(const ModelConfig& c, std::int64_t n) {
  const LinearAttentionConfig& la = c.hybrid.linear;
  const std::int64_t proj_cols = la.conv_channels() + la.value_dim() + 2 * la.n_v_heads;
  if (n > capacity_) {
    const std::int64_t cap = std::max<std::int64_t>(n, 16);
    proj_ = backend_.alloc(DType::F32, cap, std::max<std::int64_t>(proj_cols, 1));
    core_ = backend_.alloc(DType::F32, cap, std::max<std::int64_t>(la.value_dim(), 1));
    gate_ = backend_.alloc(DType::F32, cap, c.n_heads * c.head_dim);
    capacity_ = cap;
  }
  proj = proj_->tensor().rows_slice(0, n);
  core = core_->tensor().rows_slice(0, n);
  gate = gate_->tensor().rows_slice(0, n);
}

void run_gated_delta_net(const GatedDeltaNetWeights& w, LayerContext& ctx, HybridWorkspace& hw,
                         TensorRef xn, std::int64_t linear_layer) {
  Backend& be = ctx.backend;
  const StateLayout& st = ctx.kv.state;
  const std::int64_t C = st.conv_channels, vd = st.n_v_heads * st.v_head_dim, nv = st.n_v_heads;
  const TensorRef qkv = hw.proj.cols_slice(0, C);           // [n, C]
  const TensorRef z = hw.proj.cols_slice(C, vd);            // [n, vd]
  const TensorRef b = hw.proj.cols_slice(C + vd, nv);       // [n, nv]
  const TensorRef a = hw.proj.cols_slice(C + vd + nv, nv);  // [n, nv]
  const MatmulTarget targets[] = {
      {&w.qkv, nullptr, qkv}, {&w.z, nullptr, z}, {&w.b, nullptr, b}, {&w.a, nullptr, a}};
  be.matmul_multi(xn, targets);
  be.causal_conv1d(qkv, w.conv, ctx.kv, linear_layer, ctx.batch);
  be.gated_delta_rule(qkv, a, b, w.a_log, w.dt_bias, ctx.kv, linear_layer, ctx.batch, hw.core);
  be.rms_norm(hw.core, w.norm, ctx.qk_norm_eps, 0.0f, hw.core);  // per value head
  be.glu(z, hw.core, GluActivation::Silu, hw.core);              // * silu(z)
  be.matmul(hw.core, w.out, nullptr, ctx.ws.y);
}

void run_gated_attention(const GatedAttentionWeights& w, LayerContext& ctx, HybridWorkspace& hw,
                         TensorRef xn, std::int64_t kv_layer) {
  Backend& be = ctx.backend;
  const AttentionParams& p = ctx.attention;
  const std::int64_t q_dim = p.n_heads * p.head_dim, kv_dim = p.n_kv_heads * p.head_dim;
  const TensorRef q = ctx.ws.qkv.cols_slice(0, q_dim);
  const TensorRef k = ctx.ws.qkv.cols_slice(q_dim, kv_dim);
  const TensorRef v = ctx.ws.qkv.cols_slice(q_dim + kv_dim, kv_dim);
  const MatmulTarget targets[] = {
      {&w.q, nullptr, q}, {&w.gate, nullptr, hw.gate}, {&w.k, nullptr, k}, {&w.v, nullptr, v}};
  be.matmul_multi(xn, targets);
  be.rms_norm(q, w.q_norm, ctx.qk_norm_eps, ctx.norm_offset, q);
  be.rms_norm(k, w.k_norm, ctx.qk_norm_eps, ctx.norm_offset, k);
  // q and k are adjacent in qkv: one call rotates the heads of both and stores k and v.
  be.rope_store_kv(ctx.ws.qkv.cols_slice(0, q_dim + kv_dim), v, p.head_dim, ctx.rope, ctx.kv, kv_layer,
                   ctx.batch);
  be.attention(q, ctx.kv, kv_layer, ctx.batch, p, ctx.ws.attn);
  be.sigmoid_mul(ctx.ws.attn, hw.gate);
  be.matmul(ctx.ws.attn, w.o, nullptr, ctx.ws.y);
}

StateLayout state_layout_for(const ModelConfig& c, std::int64_t n_slots) {
  const LinearAttentionConfig& la = c.hybrid.linear;
  if (!la.any()) return {};
  std::int64_t n_linear = 0;
  for (bool b : la.layer_is_linear) n_linear += b ? 1 : 0;
  return {.n_layers = n_linear,
          .n_slots = n_slots,
          .conv_rows = la.conv_kernel - 1,
          .conv_channels = la.conv_channels(),
          .n_k_heads = la.n_k_heads,
          .n_v_heads = la.n_v_heads,
          .k_head_dim = la.k_head_dim,
          .v_head_dim = la.v_head_dim};
}

}  // namespace akv
