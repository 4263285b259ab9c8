// Hybrid GGUF Gated DeltaNet tensors -> checkpoint tensors (see gguf_hybrid_weights.h).
#include "models/gguf_hybrid_weights.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "tensor/dequantize.h"

namespace akv {

namespace {

constexpr std::string_view kStems[] = {"ssm_a",     "ssm_conv1d", "ssm_dt",   "ssm_norm",
                                       "ssm_out",   "ssm_in",     "ssm_ba",   "ssm_beta",
                                       "ssm_alpha", "attn_qkv",   "attn_gate"};

using Rows = std::vector<std::int64_t>;

Rows row_span(std::int64_t begin, std::int64_t n) {
  Rows rows(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) rows[i] = begin + i;
  return rows;
}

// The order that puts tiled value heads back in grouped order: entry (i * r + j) * head + x,
// value head j of key head i, is stored at (j * nk + i) * head + x (+ offset), where the
// converter moved it (r value heads per key head, `head` entries per value head).
Rows grouped_from_tiled(std::int64_t nk, std::int64_t r, std::int64_t head,
                        std::int64_t offset = 0) {
  Rows rows;
  for (std::int64_t i = 0; i < nk; ++i)
    for (std::int64_t j = 0; j < r; ++j)
      for (std::int64_t x = 0; x < head; ++x) rows.push_back(offset + (j * nk + i) * head + x);
  return rows;
}

Rows concat(Rows a, const Rows& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Tensor `t` as checkpoint tensor `name` of `shape`, its rows (first dim; elements of a vector)
// picked in the order `rows` (empty: all, as stored): quantized matrices the backend takes stay
// in their blocks, everything else becomes `dtype`. Zero copy when nothing changes.
void add_rows(MappedTensors& out, const GgufTensor& t, std::string name,
              std::vector<std::int64_t> shape, const Rows& rows, DType dtype,
              const KeepQuantized& keep_quantized) {
  const std::optional<DType> q = find_dtype_of(t.type);
  const bool blocks = t.dims.size() == 2 && q && dtype_is_quantized(*q) && keep_quantized(*q);
  std::span<const std::uint8_t> src = t.bytes;
  std::vector<std::uint8_t> converted;
  if (!blocks && plain_dtype(t.type) != dtype) {
    converted = encode_f32(dequantize_tensor(t), dtype);
    src = converted;
  }
  if (!rows.empty()) {
    const std::int64_t n_rows = t.dims.size() == 1 ? t.numel() : t.n_rows();
    const std::size_t row_bytes = src.size() / static_cast<std::size_t>(n_rows);
    std::vector<std::uint8_t> picked(rows.size() * row_bytes);
    for (std::size_t i = 0; i < rows.size(); ++i)
      std::memcpy(picked.data() + i * row_bytes,
                  src.data() + static_cast<std::size_t>(rows[i]) * row_bytes, row_bytes);
    src = out.keep(std::move(picked));
  } else if (!converted.empty()) {
    src = out.keep(std::move(converted));
  }
  out.add(std::move(name), blocks ? *q : dtype, std::move(shape), src, t.file);
}

// A Gated DeltaNet layer's shapes and what the file did to it.
struct LinearLayer {
  const GgufReader& g;
  std::string blk, hf;  // "blk.N.", "model.layers.N.linear_attn."
  std::int64_t hidden, nk, nv, r, dv, key_dim, value_dim, conv_kernel;
  bool tiled;  // Qwen3.5's value heads in tiled order

  const GgufTensor& get(const std::string& stem, const std::vector<std::int64_t>& shape) const {
    return gguf_tensor_of_shape(g, blk + stem, shape);
  }
  // Grouped order for `head`-sized value-head entries after `offset` leading ones (empty when
  // the file kept grouped order).
  Rows v_rows(std::int64_t head, std::int64_t offset = 0) const {
    if (!tiled) return {};
    return concat(row_span(0, offset), grouped_from_tiled(nk, r, head, offset));
  }
};

// A = -exp(A_log) as the converter stored it -> A_log, value heads in grouped order.
void add_a_log(MappedTensors& out, const LinearLayer& l, DType dtype) {
  const GgufTensor& t = l.get("ssm_a", {l.nv});
  const std::vector<float> a = dequantize_tensor(t);
  const Rows order = l.tiled ? grouped_from_tiled(l.nk, l.r, 1) : row_span(0, l.nv);
  std::vector<float> a_log(a.size());
  for (std::size_t h = 0; h < a.size(); ++h) {
    const float v = a[static_cast<std::size_t>(order[h])];
    if (!(v < 0.0f))
      throw Error(ErrorKind::BadFormat, t.file + ": tensor '" + l.blk + "ssm_a' holds " +
                                            std::to_string(v) +
                                            ", expected -exp(A_log) < 0 for every value head");
    a_log[h] = static_cast<float>(std::log(-static_cast<double>(v)));
  }
  out.add(l.hf + "A_log", dtype, {l.nv}, out.keep(encode_f32(a_log, dtype)), t.file);
}

// out_proj [hidden, value_dim]: value heads are its columns; reordered in f32 (a quantized
// out_proj loses its blocks here: its columns move inside the blocks).
void add_out_proj(MappedTensors& out, const LinearLayer& l, DType dtype,
                  const KeepQuantized& keep_quantized) {
  const GgufTensor& t = l.get("ssm_out.weight", {l.hidden, l.value_dim});
  const std::string name = l.hf + "out_proj.weight";
  if (!l.tiled) return add_rows(out, t, name, {l.hidden, l.value_dim}, {}, dtype, keep_quantized);
  const std::vector<float> v = dequantize_tensor(t);
  const Rows cols = grouped_from_tiled(l.nk, l.r, l.dv);
  std::vector<float> w(v.size());
  for (std::int64_t row = 0; row < l.hidden; ++row)
    for (std::int64_t c = 0; c < l.value_dim; ++c)
      w[static_cast<std::size_t>(row * l.value_dim + c)] =
          v[static_cast<std::size_t>(row * l.value_dim + cols[c])];
  out.add(name, dtype, {l.hidden, l.value_dim}, out.keep(encode_f32(w, dtype)), t.file);
}

// The input projections: in_proj_qkv / in_proj_z / in_proj_b / in_proj_a, or a legacy file's
// fused in_proj_qkvz / in_proj_ba.
void add_in_proj(MappedTensors& out, const LinearLayer& l, DType dtype,
                 const KeepQuantized& keep_quantized) {
  const std::int64_t C = 2 * l.key_dim + l.value_dim, H = l.hidden;
  if (l.g.find(l.blk + "ssm_in.weight") != nullptr) {
    add_rows(out, l.get("ssm_in.weight", {C + l.value_dim, H}), l.hf + "in_proj_qkvz.weight",
             {C + l.value_dim, H}, {}, dtype, keep_quantized);
    add_rows(out, l.get("ssm_ba.weight", {2 * l.nv, H}), l.hf + "in_proj_ba.weight", {2 * l.nv, H},
             {}, dtype, keep_quantized);
    return;
  }
  add_rows(out, l.get("attn_qkv.weight", {C, H}), l.hf + "in_proj_qkv.weight", {C, H},
           l.v_rows(l.dv, 2 * l.key_dim), dtype, keep_quantized);
  add_rows(out, l.get("attn_gate.weight", {l.value_dim, H}), l.hf + "in_proj_z.weight",
           {l.value_dim, H}, l.v_rows(l.dv), dtype, keep_quantized);
  if (l.g.find(l.blk + "ssm_ba.weight") != nullptr) {
    // Qwen3-Next: per key-head group [b: r rows | a: r rows], value heads in grouped order.
    Rows b, a;
    for (std::int64_t i = 0; i < l.nk; ++i)
      for (std::int64_t j = 0; j < l.r; ++j) {
        b.push_back(i * 2 * l.r + j);
        a.push_back(i * 2 * l.r + l.r + j);
      }
    const GgufTensor& ba = l.get("ssm_ba.weight", {2 * l.nv, H});
    add_rows(out, ba, l.hf + "in_proj_b.weight", {l.nv, H}, b, dtype, keep_quantized);
    add_rows(out, ba, l.hf + "in_proj_a.weight", {l.nv, H}, a, dtype, keep_quantized);
    return;
  }
  add_rows(out, l.get("ssm_beta.weight", {l.nv, H}), l.hf + "in_proj_b.weight", {l.nv, H},
           l.v_rows(1), dtype, keep_quantized);
  add_rows(out, l.get("ssm_alpha.weight", {l.nv, H}), l.hf + "in_proj_a.weight", {l.nv, H},
           l.v_rows(1), dtype, keep_quantized);
}

}  // namespace

bool is_gguf_linear_attention_stem(std::string_view stem) {
  for (const std::string_view s : kStems)
    if (s == stem) return true;
  return false;
}

void append_gguf_linear_attention(const GgufReader& g, const ModelConfig& c, std::int64_t layer,
                                  DType dtype, const KeepQuantized& keep_quantized,
                                  MappedTensors& out) {
  const LinearAttentionConfig& la = c.hybrid.linear;
  const std::string arch = g.metadata().get_string("general.architecture");
  const std::int64_t r = la.n_v_heads / la.n_k_heads;
  const LinearLayer l{.g = g,
                      .blk = "blk." + std::to_string(layer) + ".",
                      .hf = "model.layers." + std::to_string(layer) + ".linear_attn.",
                      .hidden = c.hidden_size,
                      .nk = la.n_k_heads,
                      .nv = la.n_v_heads,
                      .r = r,
                      .dv = la.v_head_dim,
                      .key_dim = la.key_dim(),
                      .value_dim = la.value_dim(),
                      .conv_kernel = la.conv_kernel,
                      .tiled = (arch == "qwen35" || arch == "qwen35moe") && r > 1};
  const std::int64_t C = la.conv_channels();
  add_in_proj(out, l, dtype, keep_quantized);
  add_rows(out, l.get("ssm_conv1d.weight", {C, l.conv_kernel}), l.hf + "conv1d.weight",
           {C, 1, l.conv_kernel}, l.v_rows(l.dv, 2 * l.key_dim), dtype, keep_quantized);
  add_rows(out, l.get("ssm_dt.bias", {l.nv}), l.hf + "dt_bias", {l.nv}, l.v_rows(1), dtype,
           keep_quantized);
  add_a_log(out, l, dtype);
  add_rows(out, l.get("ssm_norm.weight", {l.dv}), l.hf + "norm.weight", {l.dv}, {}, dtype,
           keep_quantized);
  add_out_proj(out, l, dtype, keep_quantized);
}

}  // namespace akv
