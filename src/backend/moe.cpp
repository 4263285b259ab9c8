#include "backend/moe.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "base/check.h"
#include "tensor/dequantize.h"
#include "tensor/dtype.h"

namespace akv {

void route_experts(std::span<const float> logits, const MoeParams& p, std::span<std::int32_t> ids,
                   std::span<float> weights) {
  const auto n = static_cast<std::int64_t>(logits.size());
  AKV_CHECK(n == p.n_experts && p.top_k >= 1 && p.top_k <= n, "route_experts: top_k of n_experts");
  AKV_CHECK(static_cast<std::int64_t>(ids.size()) >= p.top_k &&
                static_cast<std::int64_t>(weights.size()) >= p.top_k,
            "route_experts: output size");
  // Top k by selection: k passes, each taking the largest logit not yet taken (lowest id on ties).
  // Softmax is monotonic, so both gatings pick the same experts; they differ in the weights.
  for (std::int64_t i = 0; i < p.top_k; ++i) {
    std::int32_t best = -1;
    for (std::int32_t e = 0; e < n; ++e) {
      bool taken = false;
      for (std::int64_t j = 0; j < i; ++j) taken |= ids[j] == e;
      if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
    }
    ids[i] = best;
  }
  const double top = logits[ids[0]];
  double chosen = 0.0;
  for (std::int64_t i = 0; i < p.top_k; ++i) chosen += std::exp(double(logits[ids[i]]) - top);
  double denom = chosen;
  if (p.gating == MoeGating::SoftmaxTopK && !p.norm_topk_prob) {
    denom = 0.0;
    for (float l : logits) denom += std::exp(double(l) - top);
  }
  for (std::int64_t i = 0; i < p.top_k; ++i)
    weights[i] = static_cast<float>(std::exp(double(logits[ids[i]]) - top) / denom);
}

float expert_activation(float gate, float up, const MoeParams& p) {
  if (p.act == ExpertActivation::Silu) return gate / (1.0f + std::exp(-gate)) * up;
  const float g = std::min(gate, p.swiglu_limit);
  const float u = std::clamp(up, -p.swiglu_limit, p.swiglu_limit);
  return (u + 1.0f) * (g / (1.0f + std::exp(-p.swiglu_alpha * g)));
}

namespace {

constexpr float kE2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

}  // namespace

float mxfp4_e2m1_value(std::uint8_t nibble) {
  return kE2m1[nibble & 0x0f];
}

float mxfp4_scale_value(std::uint8_t e8m0) {
  if (e8m0 == 255) return std::numeric_limits<float>::quiet_NaN();
  if (e8m0 == 0) return std::ldexp(1.0f, -127);            // the one subnormal
  return std::bit_cast<float>(std::uint32_t{e8m0} << 23);  // 2^(e - 127): the exponent field
}

void decode_mxfp4_row(const std::uint8_t* blocks, const std::uint8_t* scales, std::int64_t n,
                      float* out) {
  AKV_CHECK(n % 32 == 0, "decode_mxfp4_row: a whole number of 32-value blocks");
  for (std::int64_t b = 0; b < n / 32; ++b) {
    const float scale = mxfp4_scale_value(scales[b]);
    for (std::int64_t i = 0; i < 16; ++i) {
      const std::uint8_t byte = blocks[b * 16 + i];
      out[b * 32 + 2 * i] = kE2m1[byte & 0x0f] * scale;
      out[b * 32 + 2 * i + 1] = kE2m1[byte >> 4] * scale;
    }
  }
}

void mxfp4_row_to_gguf_blocks(const std::uint8_t* blocks, const std::uint8_t* scales,
                              std::int64_t n, std::uint8_t* out) {
  AKV_CHECK(n % 32 == 0, "mxfp4_row_to_gguf_blocks: a whole number of 32-value blocks");
  for (std::int64_t b = 0; b < n / 32; ++b) {
    const std::uint8_t* src = blocks + b * 16;  // value 2k: low nibble of byte k, 2k + 1: high
    const auto code = [src](int j) { return (src[j / 2] >> (4 * (j % 2))) & 0x0f; };
    std::uint8_t* dst = out + b * 17;
    dst[0] = scales[b];
    for (int j = 0; j < 16; ++j)
      dst[1 + j] = static_cast<std::uint8_t>(code(j) | (code(j + 16) << 4));
  }
}

void expert_matrix_row(ExpertFormat format, const WeightRef& w, const WeightRef& scales,
                       std::int64_t row, float* out) {
  AKV_CHECK(row >= 0 && row < w.rows, "expert_matrix_row: row out of range");
  if (format == ExpertFormat::Mxfp4) {
    const auto* blocks = static_cast<const std::uint8_t*>(w.data) + row * (w.cols / 2);
    const auto* sc = static_cast<const std::uint8_t*>(scales.data) + row * (w.cols / 32);
    decode_mxfp4_row(blocks, sc, w.cols, out);
    return;
  }
  if (format == ExpertFormat::GgufBlocks) {
    const std::size_t row_bytes = dtype_row_bytes(w.dtype, w.cols);
    const std::optional<GgmlType> type = find_ggml_type_of(w.dtype);
    AKV_CHECK(type.has_value(), "expert_matrix_row: a GGUF block type");
    dequantize(*type, {static_cast<const std::uint8_t*>(w.data) + row * row_bytes, row_bytes},
               {out, static_cast<std::size_t>(w.cols)});
    return;
  }
  const auto* src = static_cast<const char*>(w.data) +
                    row * w.cols * static_cast<std::int64_t>(dtype_size(w.dtype));
  convert_to_f32(w.dtype, src, out, static_cast<std::size_t>(w.cols));
}

void check_moe_shapes(TensorRef x, TensorRef router_logits, const MoeWeights& w, const MoeParams& p,
                      const MoeScratch& scratch, TensorRef out) {
  const std::int64_t n = x.rows, hidden = x.cols;
  AKV_CHECK(p.n_experts > 0 && p.top_k >= 1 && p.top_k <= p.n_experts && p.inter > 0,
            "moe: params");
  AKV_CHECK(router_logits.rows == n && router_logits.cols == p.n_experts,
            "moe: router logits shape");
  AKV_CHECK(out.rows == n && out.cols == hidden, "moe: out shape");
  AKV_CHECK(w.gate_up.rows == p.n_experts * 2 * p.inter && w.gate_up.cols == hidden,
            "moe: gate_up shape");
  AKV_CHECK(w.down.rows == p.n_experts * hidden && w.down.cols == p.inter, "moe: down shape");
  if (w.format == ExpertFormat::Mxfp4) {
    AKV_CHECK(hidden % 32 == 0 && p.inter % 32 == 0, "moe: MXFP4 rows are whole blocks");
    AKV_CHECK(!w.gate_up_scales.empty() && !w.down_scales.empty(), "moe: MXFP4 scales");
  }
  if (w.format == ExpertFormat::GgufBlocks) {
    AKV_CHECK(dtype_is_quantized(w.gate_up.dtype) && dtype_is_quantized(w.down.dtype),
              "moe: GGUF experts of quantized dtypes");
    AKV_CHECK(hidden % dtype_block_elems(w.gate_up.dtype) == 0 &&
                  p.inter % dtype_block_elems(w.down.dtype) == 0,
              "moe: GGUF expert rows are whole blocks");
  }
  AKV_CHECK(w.gate_up_bias.empty() ||
                (w.gate_up_bias.rows == p.n_experts && w.gate_up_bias.cols == 2 * p.inter),
            "moe: gate_up bias shape");
  AKV_CHECK(w.down_bias.empty() || (w.down_bias.rows == p.n_experts && w.down_bias.cols == hidden),
            "moe: down bias shape");
  AKV_CHECK(scratch.route.rows >= n && scratch.route.cols >= 2 * p.top_k, "moe: route scratch");
  AKV_CHECK(scratch.gate_up.rows >= n * p.top_k && scratch.gate_up.cols >= 2 * p.inter,
            "moe: gate_up scratch");
  AKV_CHECK(scratch.act.rows >= n * p.top_k && scratch.act.cols >= p.inter, "moe: act scratch");
  AKV_CHECK(scratch.down.rows >= n * p.top_k && scratch.down.cols >= hidden, "moe: down scratch");
}

}  // namespace akv
