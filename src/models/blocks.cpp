#include "models/blocks.h"

namespace akv {

AttentionWeights load_attention(WeightLoader& w, const std::string& p, const ModelConfig& c,
                                const AttentionLayout& layout) {
  const std::int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
  AttentionWeights a;
  if (layout.fused_qkv) {
    a.qkv = w.get(p + "qkv_proj.weight", {q_dim + 2 * kv_dim, c.hidden_size});
  } else {
    a.q = w.get(p + "q_proj.weight", {q_dim, c.hidden_size});
    a.k = w.get(p + "k_proj.weight", {kv_dim, c.hidden_size});
    a.v = w.get(p + "v_proj.weight", {kv_dim, c.hidden_size});
  }
  if (layout.bias) {
    a.q_bias = w.get(p + "q_proj.bias", {q_dim});
    a.k_bias = w.get(p + "k_proj.bias", {kv_dim});
    a.v_bias = w.get(p + "v_proj.bias", {kv_dim});
  }
  if (layout.qk_norm) {
    a.q_norm = w.get(p + "q_norm.weight", {c.head_dim});
    a.k_norm = w.get(p + "k_norm.weight", {c.head_dim});
  }
  a.o = w.get(p + "o_proj.weight", {c.hidden_size, q_dim});
  if (layout.o_bias) a.o_bias = w.get(p + "o_proj.bias", {c.hidden_size});
  if (layout.sinks) a.sinks = w.get_f32(p + "sinks", {c.n_heads});  // F32: AttentionParams::sinks
  return a;
}

MlpWeights load_mlp(WeightLoader& w, const std::string& p, const ModelConfig& c, bool fused) {
  MlpWeights m;
  if (fused) {
    m.gate_up = w.get(p + "gate_up_proj.weight", {2 * c.intermediate_size, c.hidden_size});
  } else {
    m.gate = w.get(p + "gate_proj.weight", {c.intermediate_size, c.hidden_size});
    m.up = w.get(p + "up_proj.weight", {c.intermediate_size, c.hidden_size});
  }
  m.down = w.get(p + "down_proj.weight", {c.hidden_size, c.intermediate_size});
  return m;
}

void Workspace::reserve(const ModelConfig& c, std::int64_t n) {
  if (n > capacity_) {
    const std::int64_t cap = std::max<std::int64_t>(n, 16);
    const std::int64_t q_dim = c.n_heads * c.head_dim, kv_dim = c.n_kv_heads * c.head_dim;
    x_ = backend_.alloc(DType::F32, cap, c.hidden_size);
    xn_ = backend_.alloc(DType::F32, cap, c.hidden_size);
    y_ = backend_.alloc(DType::F32, cap, c.hidden_size);
    qkv_ = backend_.alloc(DType::F32, cap, q_dim + 2 * kv_dim);
    attn_ = backend_.alloc(DType::F32, cap, q_dim);
    gate_up_ = backend_.alloc(DType::F32, cap, 2 * c.intermediate_size);
    act_ = backend_.alloc(DType::F32, cap, c.intermediate_size);
    if (c.moe.n_experts > 0) {
      const MoeConfig& m = c.moe;
      router_ = backend_.alloc(DType::F32, cap, m.n_experts);
      route_ = backend_.alloc(DType::F32, cap, 2 * m.top_k);
      moe_gate_up_ = backend_.alloc(DType::F32, cap * m.top_k, 2 * m.inter);
      moe_act_ = backend_.alloc(DType::F32, cap * m.top_k, m.inter);
      moe_down_ = backend_.alloc(DType::F32, cap * m.top_k, c.hidden_size);
      if (m.shared_inter > 0) {
        moe_shared_ = backend_.alloc(DType::F32, cap, c.hidden_size);
        moe_shared_gate_ = backend_.alloc(DType::F32, cap, 1);
      }
    }
    capacity_ = cap;
  }
  x = x_->tensor().rows_slice(0, n);
  xn = xn_->tensor().rows_slice(0, n);
  y = y_->tensor().rows_slice(0, n);
  qkv = qkv_->tensor().rows_slice(0, n);
  attn = attn_->tensor().rows_slice(0, n);
  gate_up = gate_up_->tensor().rows_slice(0, n);
  act = act_->tensor().rows_slice(0, n);
  if (router_) {
    const std::int64_t k = c.moe.top_k;
    router = router_->tensor().rows_slice(0, n);
    moe = {.route = route_->tensor().rows_slice(0, n),
           .gate_up = moe_gate_up_->tensor().rows_slice(0, n * k),
           .act = moe_act_->tensor().rows_slice(0, n * k),
           .down = moe_down_->tensor().rows_slice(0, n * k)};
  }
  if (moe_shared_) {
    moe_shared = moe_shared_->tensor().rows_slice(0, n);
    moe_shared_gate = moe_shared_gate_->tensor().rows_slice(0, n);
  }
}

void run_attention(const AttentionWeights& w, LayerContext& ctx, TensorRef xn) {
  Backend& b = ctx.backend;
  const AttentionParams& p = ctx.attention;
  const std::int64_t q_dim = p.n_heads * p.head_dim, kv_dim = p.n_kv_heads * p.head_dim;
  TensorRef q = ctx.ws.qkv.cols_slice(0, q_dim);
  TensorRef k = ctx.ws.qkv.cols_slice(q_dim, kv_dim);
  TensorRef v = ctx.ws.qkv.cols_slice(q_dim + kv_dim, kv_dim);
  if (!w.qkv.empty()) {
    b.matmul(xn, w.qkv, nullptr, ctx.ws.qkv);
  } else {
    const MatmulTarget qkv[] = {{&w.q, &w.q_bias, q}, {&w.k, &w.k_bias, k}, {&w.v, &w.v_bias, v}};
    b.matmul_multi(xn, qkv);
  }
  if (!w.q_norm.empty()) {
    b.rms_norm(q, w.q_norm, ctx.qk_norm_eps, ctx.norm_offset, q);
    b.rms_norm(k, w.k_norm, ctx.qk_norm_eps, ctx.norm_offset, k);
  }
  // q and k are adjacent in qkv: one call rotates the heads of both and stores k and v.
  b.rope_store_kv(ctx.ws.qkv.cols_slice(0, q_dim + kv_dim), v, p.head_dim, ctx.rope, ctx.kv,
                  ctx.layer, ctx.batch);
  AttentionParams with_sinks = p;
  with_sinks.sinks = w.sinks;
  b.attention(q, ctx.kv, ctx.layer, ctx.batch, with_sinks, ctx.ws.attn);
  b.matmul(ctx.ws.attn, w.o, &w.o_bias, ctx.ws.y);
}

void run_mlp(const MlpWeights& w, LayerContext& ctx, TensorRef xn, GluActivation act) {
  ctx.backend.gated_mlp(xn, w, act, ctx.ws.gate_up, ctx.ws.act, ctx.ws.y);
}

}  // namespace akv
