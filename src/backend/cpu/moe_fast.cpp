// The fast CPU MoE op: tokens routed on the host (cheap), grouped by expert (counting sort), and
// each used expert run once over its tokens with the backend's matmul (GEMV for a few rows,
// sgemm for many), so an expert's weights are read once per call and unused experts not at all.
// MXFP4 experts: row by row (decoded, then the SIMD GEMV) for a few rows, else decoded to f32 per
// used expert first (threaded) and multiplied through sgemm. GGUF-block experts: each expert's
// rows are a quantized matrix of their own, through the dense path's quantized matmul (int8
// inputs, integer dot kernels; types without a kernel dequantized row by row).
#include <algorithm>
#include <cstring>

#include "backend/cpu/fast_backend.h"

namespace akv {

namespace {

// Rows [e * rows, (e + 1) * rows) of a stacked matrix (float or GGUF blocks) as a matrix of its
// own.
WeightRef expert_slice(const WeightRef& w, std::int64_t e, std::int64_t rows) {
  return {static_cast<const char*>(w.data) +
              e * rows * static_cast<std::int64_t>(dtype_row_bytes(w.dtype, w.cols)),
          w.dtype, rows, w.cols};
}

WeightRef bias_row(const WeightRef& b, std::int64_t e) {
  if (b.empty()) return {};
  return {static_cast<const char*>(b.data) +
              e * b.cols * static_cast<std::int64_t>(dtype_size(b.dtype)),
          b.dtype, 1, b.cols};
}

}  // namespace

void FastBackend::mxfp4_gemv(TensorRef x, const WeightRef& w, const WeightRef& scales,
                             std::int64_t e, std::int64_t rows, const WeightRef& bias,
                             TensorRef out) {
  const Kernels& k = kernels_;
  pool_.parallel_for(rows, 16, [&](std::int64_t r0, std::int64_t r1) {
    thread_local std::vector<float> row;  // grows to the widest row once per thread
    row.resize(static_cast<std::size_t>(w.cols));
    for (std::int64_t r = r0; r < r1; ++r) {
      expert_matrix_row(ExpertFormat::Mxfp4, w, scales, e * rows + r, row.data());
      const GemvArgs a{
          .x = x.row<float>(0),
          .x_stride = x.stride,
          .n_rows = x.rows,
          .w = row.data(),
          .w_dtype = DType::F32,
          .k = w.cols,
          .bias = bias.empty() ? nullptr
                               : static_cast<const char*>(bias.data) + r * dtype_size(bias.dtype),
          .bias_dtype = bias.empty() ? DType::F32 : bias.dtype,
          .out = out.row<float>(0) + r,
          .out_stride = out.stride};
      k.gemv(a, 0, 1);
    }
  });
}

WeightRef FastBackend::expert_matrix(ExpertFormat format, const WeightRef& w,
                                     const WeightRef& scales, std::int64_t e, std::int64_t rows,
                                     std::vector<float>& decoded) {
  if (format != ExpertFormat::Mxfp4) return expert_slice(w, e, rows);
  decoded.resize(static_cast<std::size_t>(rows * w.cols));
  float* dst = decoded.data();
  pool_.parallel_for(rows, 16, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r)
      expert_matrix_row(format, w, scales, e * rows + r, dst + r * w.cols);
  });
  return {decoded.data(), DType::F32, rows, w.cols};
}

void FastBackend::moe(TensorRef x, TensorRef router_logits, const MoeWeights& w, const MoeParams& p,
                      const MoeScratch& scratch, TensorRef out) {
  if (x.dtype != DType::F32 || out.dtype != DType::F32 ||
      (w.format == ExpertFormat::Float &&
       (!fast_weight_dtype(w.gate_up.dtype) || !fast_weight_dtype(w.down.dtype)))) {
    // The reference reads GGUF blocks: expert stacks repacked at upload would need an f32 path
    // here.
    AKV_CHECK(find_repacked(w.gate_up) == nullptr && find_repacked(w.down) == nullptr,
              "moe: repacked experts need f32 activations");
    return ReferenceBackend::moe(x, router_logits, w, p, scratch, out);
  }
  check_moe_shapes(x, router_logits, w, p, scratch, out);
  const std::int64_t n = x.rows, k = p.top_k, hidden = x.cols, inter = p.inter;
  MoeRouting& r = moe_routing_;
  r.ids.resize(static_cast<std::size_t>(n * k));
  r.weights.resize(r.ids.size());
  r.slot.resize(r.ids.size());
  r.order.resize(r.ids.size());
  r.first.assign(static_cast<std::size_t>(p.n_experts + 1), 0);
  // 1. Route every token; 2. group the (token, choice) pairs by expert (counting sort, stable).
  for (std::int64_t t = 0; t < n; ++t)
    route_experts({router_logits.row<const float>(t), static_cast<std::size_t>(p.n_experts)}, p,
                  std::span(r.ids).subspan(t * k, k), std::span(r.weights).subspan(t * k, k));
  for (std::int32_t e : r.ids) ++r.first[e + 1];
  for (std::int64_t e = 0; e < p.n_experts; ++e) r.first[e + 1] += r.first[e];
  std::vector<std::int64_t>& next = r.next;
  next.assign(r.first.begin(), r.first.end() - 1);
  for (std::int64_t a = 0; a < n * k; ++a) {
    r.slot[a] = next[r.ids[a]]++;
    r.order[r.slot[a]] = a;
  }
  // 3. Each used expert over its rows: x gathered into scratch.down, gate_up, activation, down.
  for (std::int64_t e = 0; e < p.n_experts; ++e) {
    const std::int64_t begin = r.first[e], count = r.first[e + 1] - begin;
    if (count == 0) continue;
    const TensorRef xg = scratch.down.rows_slice(begin, count).cols_slice(0, hidden);
    for (std::int64_t i = 0; i < count; ++i)
      std::memcpy(xg.row<float>(i), x.row<const float>(r.order[begin + i] / k),
                  static_cast<std::size_t>(hidden) * sizeof(float));
    const TensorRef gu = scratch.gate_up.rows_slice(begin, count).cols_slice(0, 2 * inter);
    // MXFP4 for a few rows (decode): each weight row decoded once and dotted with every input row;
    // for many rows the expert is decoded once to f32 and goes through sgemm.
    const bool direct = w.format == ExpertFormat::Mxfp4 && count < kGemmMinRows;
    const WeightRef gu_bias = bias_row(w.gate_up_bias, e);
    if (direct)
      mxfp4_gemv(xg, w.gate_up, w.gate_up_scales, e, 2 * inter, gu_bias, gu);
    else
      matmul(xg, expert_matrix(w.format, w.gate_up, w.gate_up_scales, e, 2 * inter, r.decoded),
             &gu_bias, gu);
    const TensorRef act = scratch.act.rows_slice(begin, count).cols_slice(0, inter);
    if (p.act == ExpertActivation::Silu && !p.interleaved_gate_up) {
      glu(gu.cols_slice(0, inter), gu.cols_slice(inter, inter), GluActivation::Silu, act);
    } else {
      for (std::int64_t i = 0; i < count; ++i) {
        const float* h = gu.row<const float>(i);
        float* y = act.row<float>(i);
        for (std::int64_t j = 0; j < inter; ++j)
          y[j] = p.interleaved_gate_up ? expert_activation(h[2 * j], h[2 * j + 1], p)
                                       : expert_activation(h[j], h[inter + j], p);
      }
    }
    const WeightRef down_bias = bias_row(w.down_bias, e);
    if (direct)
      mxfp4_gemv(act, w.down, w.down_scales, e, hidden, down_bias, xg);
    else
      matmul(act, expert_matrix(w.format, w.down, w.down_scales, e, hidden, r.decoded), &down_bias,
             xg);
  }
  // 4. out[t] = sum of the token's k expert outputs, weighted, in choice order.
  for (std::int64_t t = 0; t < n; ++t) {
    float* y = out.row<float>(t);
    std::fill(y, y + hidden, 0.0f);
    for (std::int64_t i = 0; i < k; ++i) {
      const float wt = r.weights[t * k + i];
      const float* src = scratch.down.row<const float>(r.slot[t * k + i]);
      for (std::int64_t c = 0; c < hidden; ++c) y[c] += wt * src[c];
    }
  }
}

}  // namespace akv
