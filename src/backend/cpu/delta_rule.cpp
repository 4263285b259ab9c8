#include "backend/cpu/delta_rule.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/host_buffer.h"

namespace akv {

void l2_normalize(std::span<float> x, float eps, float scale) {
  double ss = 0.0;
  for (float v : x) ss += double(v) * v;
  const double inv = scale / std::sqrt(ss + eps);
  for (float& v : x) v = static_cast<float>(v * inv);
}

float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

void delta_rule_recurrent(const DeltaRuleInputs& in, float* state, float* out,
                          std::int64_t out_stride) {
  const std::int64_t dk = in.k_dim, dv = in.v_dim;
  std::vector<double> s(state, state + dk * dv);  // [dk, dv]
  std::vector<double> delta(static_cast<std::size_t>(dv));
  for (std::int64_t t = 0; t < in.n_tokens; ++t) {
    const float* q = in.q + t * in.q_stride;
    const float* k = in.k + t * in.k_stride;
    const float* v = in.v + t * in.v_stride;
    const double decay = std::exp(double(in.g[t * in.g_stride]));
    for (double& x : s) x *= decay;
    for (std::int64_t j = 0; j < dv; ++j) {
      double kv = 0.0;
      for (std::int64_t i = 0; i < dk; ++i) kv += s[i * dv + j] * k[i];
      delta[j] = (v[j] - kv) * in.beta[t * in.g_stride];
    }
    for (std::int64_t i = 0; i < dk; ++i)
      for (std::int64_t j = 0; j < dv; ++j) s[i * dv + j] += k[i] * delta[j];
    float* o = out + t * out_stride;
    for (std::int64_t j = 0; j < dv; ++j) {
      double acc = 0.0;
      for (std::int64_t i = 0; i < dk; ++i) acc += s[i * dv + j] * q[i];
      o[j] = static_cast<float>(acc);
    }
  }
  for (std::int64_t i = 0; i < dk * dv; ++i) state[i] = static_cast<float>(s[i]);
}

// Within a chunk of L tokens with state S0 before it and cum[i] = g[0] + ... + g[i]:
//   u_i = beta_i (v_i - e^cum[i] S0^T k_i) - sum_{j<i} beta_i e^(cum[i]-cum[j]) (k_i.k_j) u_j
//   o_i = e^cum[i] S0^T q_i + sum_{j<=i} e^(cum[i]-cum[j]) (q_i.k_j) u_j
//   S   = e^cum[L-1] S0 + sum_j e^(cum[L-1]-cum[j]) k_j u_j^T
// (the forward substitution is the UT transform's triangular solve).
void delta_rule_chunked(const DeltaRuleInputs& in, float* state, float* out,
                        std::int64_t out_stride, std::int64_t chunk, std::vector<float>& scratch) {
  const std::int64_t dk = in.k_dim, dv = in.v_dim;
  scratch.resize(static_cast<std::size_t>(chunk * (dv + 1) + dv));
  float* u = scratch.data();    // [chunk, dv]
  float* cum = u + chunk * dv;  // [chunk]
  float* tmp = cum + chunk;     // [dv]
  for (std::int64_t c0 = 0; c0 < in.n_tokens; c0 += chunk) {
    const std::int64_t L = std::min(chunk, in.n_tokens - c0);
    const float* q = in.q + c0 * in.q_stride;
    const float* k = in.k + c0 * in.k_stride;
    const float* v = in.v + c0 * in.v_stride;
    float acc = 0.0f;
    for (std::int64_t i = 0; i < L; ++i) cum[i] = acc += in.g[(c0 + i) * in.g_stride];
    // u = rhs, then the forward substitution.
    for (std::int64_t i = 0; i < L; ++i) {
      const float* ki = k + i * in.k_stride;
      const float gi = std::exp(cum[i]), bi = in.beta[(c0 + i) * in.g_stride];
      std::fill(tmp, tmp + dv, 0.0f);
      for (std::int64_t a = 0; a < dk; ++a) {
        const float* srow = state + a * dv;
        for (std::int64_t j = 0; j < dv; ++j) tmp[j] += srow[j] * ki[a];
      }
      float* ui = u + i * dv;
      for (std::int64_t j = 0; j < dv; ++j) ui[j] = bi * (v[i * in.v_stride + j] - gi * tmp[j]);
      for (std::int64_t j = 0; j < i; ++j) {
        const float* kj = k + j * in.k_stride;
        float dot = 0.0f;
        for (std::int64_t a = 0; a < dk; ++a) dot += ki[a] * kj[a];
        const float w = bi * std::exp(cum[i] - cum[j]) * dot;
        const float* uj = u + j * dv;
        for (std::int64_t x = 0; x < dv; ++x) ui[x] -= w * uj[x];
      }
    }
    // Outputs.
    for (std::int64_t i = 0; i < L; ++i) {
      const float* qi = q + i * in.q_stride;
      float* o = out + (c0 + i) * out_stride;
      const float gi = std::exp(cum[i]);
      std::fill(o, o + dv, 0.0f);
      for (std::int64_t a = 0; a < dk; ++a) {
        const float* srow = state + a * dv;
        const float qa = gi * qi[a];
        for (std::int64_t j = 0; j < dv; ++j) o[j] += srow[j] * qa;
      }
      for (std::int64_t j = 0; j <= i; ++j) {
        const float* kj = k + j * in.k_stride;
        float dot = 0.0f;
        for (std::int64_t a = 0; a < dk; ++a) dot += qi[a] * kj[a];
        const float w = std::exp(cum[i] - cum[j]) * dot;
        const float* uj = u + j * dv;
        for (std::int64_t x = 0; x < dv; ++x) o[x] += w * uj[x];
      }
    }
    // State after the chunk.
    const float g_last = std::exp(cum[L - 1]);
    for (std::int64_t a = 0; a < dk * dv; ++a) state[a] *= g_last;
    for (std::int64_t j = 0; j < L; ++j) {
      const float* kj = k + j * in.k_stride;
      const float w = std::exp(cum[L - 1] - cum[j]);
      const float* uj = u + j * dv;
      for (std::int64_t a = 0; a < dk; ++a) {
        float* srow = state + a * dv;
        const float ka = w * kj[a];
        for (std::int64_t x = 0; x < dv; ++x) srow[x] += ka * uj[x];
      }
    }
  }
}

void prepare_delta_rule(TensorRef qkv, TensorRef a, TensorRef b, const WeightRef& a_log,
                        const WeightRef& dt_bias, const StateLayout& st, PreparedDeltaRule& p) {
  const std::int64_t n = qkv.rows, key_dim = st.n_k_heads * st.k_head_dim, nv = st.n_v_heads;
  AKV_CHECK(qkv.cols == 2 * key_dim + nv * st.v_head_dim && a.rows == n && b.rows == n &&
                a.cols == nv && b.cols == nv && a_log.rows * a_log.cols == nv &&
                dt_bias.rows * dt_bias.cols == nv,
            "gated_delta_rule shapes");
  p.q.resize(static_cast<std::size_t>(n * key_dim));
  p.k.resize(p.q.size());
  p.g.resize(static_cast<std::size_t>(n * nv));
  p.beta.resize(p.g.size());
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(st.k_head_dim));
  for (std::int64_t t = 0; t < n; ++t) {
    const float* row = qkv.row<float>(t);
    std::copy(row, row + key_dim, p.q.begin() + t * key_dim);
    std::copy(row + key_dim, row + 2 * key_dim, p.k.begin() + t * key_dim);
    for (std::int64_t h = 0; h < st.n_k_heads; ++h) {
      const auto off = static_cast<std::size_t>(t * key_dim + h * st.k_head_dim);
      const auto dk = static_cast<std::size_t>(st.k_head_dim);
      l2_normalize(std::span<float>(p.q).subspan(off, dk), 1e-6f, q_scale);
      l2_normalize(std::span<float>(p.k).subspan(off, dk), 1e-6f, 1.0f);
    }
    for (std::int64_t h = 0; h < nv; ++h) {
      const float A = std::exp(load_f32(a_log.data, a_log.dtype, h));
      const float dt = softplus(a.row<float>(t)[h] + load_f32(dt_bias.data, dt_bias.dtype, h));
      p.g[t * nv + h] = -A * dt;
      p.beta[t * nv + h] = 1.0f / (1.0f + std::exp(-b.row<float>(t)[h]));
    }
  }
}

DeltaRuleInputs delta_rule_inputs(const PreparedDeltaRule& p, TensorRef qkv, const StateLayout& st,
                                  const SequenceChunk& s, std::int64_t v_head) {
  const std::int64_t key_dim = st.n_k_heads * st.k_head_dim, nv = st.n_v_heads;
  const std::int64_t k_head = v_head / (nv / st.n_k_heads);
  const std::int64_t r0 = s.first_row;
  return {.q = p.q.data() + r0 * key_dim + k_head * st.k_head_dim,
          .k = p.k.data() + r0 * key_dim + k_head * st.k_head_dim,
          .v = qkv.row<float>(r0) + 2 * key_dim + v_head * st.v_head_dim,
          .q_stride = key_dim,
          .k_stride = key_dim,
          .v_stride = qkv.stride,
          .g = p.g.data() + r0 * nv + v_head,
          .beta = p.beta.data() + r0 * nv + v_head,
          .g_stride = nv,
          .n_tokens = s.n_tokens,
          .k_dim = st.k_head_dim,
          .v_dim = st.v_head_dim};
}

float* delta_rule_state(const KvStorage& kv, std::int64_t layer, const SequenceChunk& s,
                        std::int64_t v_head) {
  const StateLayout& st = kv.state;
  AKV_CHECK(layer >= 0 && layer < st.n_layers && s.state_slot >= 0 && s.state_slot < st.n_slots,
            "state slot");
  const TensorRef& r = kv.recurrent_state[layer];
  AKV_CHECK(r.stride == st.v_head_dim, "recurrent state rows are contiguous");
  float* state = r.row<float>(s.state_slot * st.recurrent_rows() + v_head * st.k_head_dim);
  if (s.start_pos == 0) std::fill(state, state + st.k_head_dim * st.v_head_dim, 0.0f);
  return state;
}

}  // namespace akv
