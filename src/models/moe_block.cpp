#include "models/moe_block.h"

#include <cstring>
#include <vector>

#include "base/error.h"
#include "tensor/dequantize.h"

namespace akv {

namespace {

// Appends the bytes of checkpoint tensor `name` ([rows, cols]) to `out` in `dtype`: as stored, or
// a quantized tensor dequantized when `dtype` is a float type.
void append_tensor(WeightLoader& w, const std::string& name, std::int64_t rows, std::int64_t cols,
                   DType dtype, std::vector<std::uint8_t>& out) {
  const TensorInfo& t = w.tensor(name, {rows, cols});
  if (dtype_is_quantized(t.dtype) && !dtype_is_quantized(dtype)) {
    std::vector<float> v(static_cast<std::size_t>(rows * cols));
    dequantize(*find_ggml_type_of(t.dtype), t.bytes, v);
    const std::size_t at = out.size(), size = dtype_size(dtype);
    out.resize(at + v.size() * size);
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::uint16_t h = dtype == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      std::memcpy(&out[at + i * size], dtype == DType::F32 ? static_cast<const void*>(&v[i]) : &h,
                  size);
    }
    return;
  }
  if (t.dtype != dtype)
    throw Error(ErrorKind::BadFormat,
                t.file + ": tensor '" + name + "': dtype " + std::string(dtype_name(t.dtype)) +
                    " differs from the other experts' " + std::string(dtype_name(dtype)));
  out.insert(out.end(), t.bytes.begin(), t.bytes.end());
}

DType float_dtype(const TensorInfo& t, const std::string& name) {
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16)
    throw Error(ErrorKind::Unsupported,
                t.file + ": tensor '" + name + "': dtype " + std::string(dtype_name(t.dtype)) +
                    " is not supported for expert weights (F32, BF16, F16, MXFP4)");
  return t.dtype;
}

// [E, in, out] -> [E * out, in], element by element in the checkpoint's dtype.
std::vector<std::uint8_t> transpose_experts(const TensorInfo& t) {
  const std::int64_t n_experts = t.shape[0], in = t.shape[1], out = t.shape[2];
  const std::size_t size = dtype_size(t.dtype);
  std::vector<std::uint8_t> bytes(t.bytes.size());
  for (std::int64_t e = 0; e < n_experts; ++e)
    for (std::int64_t i = 0; i < in; ++i)
      for (std::int64_t o = 0; o < out; ++o)
        std::memcpy(&bytes[((e * out + o) * in + i) * size],
                    &t.bytes[((e * in + i) * out + o) * size], size);
  return bytes;
}

// The bytes of experts 0..n-1 of `proj` as one span when they lie back to back in memory (the
// slices of one GGUF stack), else empty.
std::span<const std::uint8_t> contiguous_experts(WeightLoader& w, const std::string& p,
                                                 const char* proj, std::int64_t n,
                                                 std::int64_t rows, std::int64_t cols) {
  const std::span<const std::uint8_t> first = w.tensor(p + "experts.0." + proj, {rows, cols}).bytes;
  for (std::int64_t e = 1; e < n; ++e) {
    const std::span<const std::uint8_t> b =
        w.tensor(p + "experts." + std::to_string(e) + "." + proj, {rows, cols}).bytes;
    if (b.data() != first.data() + e * first.size() || b.size() != first.size()) return {};
  }
  return {first.data(), first.size() * static_cast<std::size_t>(n)};
}

}  // namespace

MoeLayerWeights load_qwen3_moe_experts(WeightLoader& w, const std::string& p,
                                       const ModelConfig& c) {
  const MoeConfig& m = c.moe;
  const std::int64_t hidden = c.hidden_size, inter = m.inter;
  MoeLayerWeights l;
  l.router = w.get(p + "gate.weight", {m.n_experts, hidden});
  const std::string first_gate = p + "experts.0.gate_proj.weight",
                    first_down = p + "experts.0.down_proj.weight";
  const TensorInfo& gate0 = w.tensor(first_gate, {inter, hidden});
  const TensorInfo& up0 = w.tensor(p + "experts.0.up_proj.weight", {inter, hidden});
  const TensorInfo& down0 = w.tensor(first_down, {hidden, inter});
  // Quantized experts (a GGUF file's blocks, or --quantize) stay in their blocks when gate and up
  // share a type and down is quantized too; otherwise the quantized ones are dequantized to the
  // float dtype of the others (the model's float dtype, or F32, when all are quantized).
  const bool blocks = dtype_is_quantized(gate0.dtype) && up0.dtype == gate0.dtype &&
                      dtype_is_quantized(down0.dtype);
  const bool float_model = c.dtype == DType::F32 || c.dtype == DType::BF16 || c.dtype == DType::F16;
  const DType fallback = !dtype_is_quantized(gate0.dtype)   ? float_dtype(gate0, first_gate)
                         : !dtype_is_quantized(down0.dtype) ? float_dtype(down0, first_down)
                         : float_model                      ? c.dtype
                                                            : DType::F32;
  const DType gu_dtype = blocks ? gate0.dtype : fallback;
  const DType dn_dtype = blocks ? down0.dtype : fallback;
  std::vector<std::uint8_t> gate_up, down;
  const std::span<const std::uint8_t> down_view =
      blocks ? contiguous_experts(w, p, "down_proj.weight", m.n_experts, hidden, inter)
             : std::span<const std::uint8_t>{};
  for (std::int64_t e = 0; e < m.n_experts; ++e) {
    const std::string ep = p + "experts." + std::to_string(e) + ".";
    append_tensor(w, ep + "gate_proj.weight", inter, hidden, gu_dtype, gate_up);
    append_tensor(w, ep + "up_proj.weight", inter, hidden, gu_dtype, gate_up);
    if (down_view.empty()) append_tensor(w, ep + "down_proj.weight", hidden, inter, dn_dtype, down);
  }
  l.experts.format = blocks ? ExpertFormat::GgufBlocks : ExpertFormat::Float;
  l.experts.gate_up = w.upload_repacked(p + "experts.gate_up", gu_dtype, m.n_experts * 2 * inter,
                                        hidden, std::move(gate_up));
  l.experts.down =
      down_view.empty()
          ? w.upload_repacked(p + "experts.down", dn_dtype, m.n_experts * hidden, inter,
                              std::move(down))
          : w.upload_view(p + "experts.down", dn_dtype, m.n_experts * hidden, inter, down_view);
  l.params = {.n_experts = m.n_experts,
              .top_k = m.top_k,
              .inter = inter,
              .gating = MoeGating::SoftmaxTopK,
              .norm_topk_prob = m.norm_topk_prob,
              .act = ExpertActivation::Silu};
  return l;
}

MoeLayerWeights load_qwen3_next_moe(WeightLoader& w, const std::string& p, const ModelConfig& c) {
  MoeLayerWeights l = load_qwen3_moe_experts(w, p, c);
  const std::int64_t hidden = c.hidden_size, inter = c.moe.shared_inter;
  const std::string s = p + "shared_expert.";
  l.shared.mlp.gate = w.get(s + "gate_proj.weight", {inter, hidden});
  l.shared.mlp.up = w.get(s + "up_proj.weight", {inter, hidden});
  l.shared.mlp.down = w.get(s + "down_proj.weight", {hidden, inter});
  l.shared.gate = w.get(p + "shared_expert_gate.weight", {1, hidden});
  l.shared.inter = inter;
  return l;
}

MoeLayerWeights load_gpt_oss_experts(WeightLoader& w, const std::string& p, const ModelConfig& c) {
  const MoeConfig& m = c.moe;
  const std::int64_t hidden = c.hidden_size, inter = m.inter, n = m.n_experts;
  MoeLayerWeights l;
  l.router = w.get(p + "router.weight", {n, hidden});
  l.router_bias = w.get(p + "router.bias", {n});
  const std::string e = p + "experts.";
  if (w.has(e + "gate_up_proj_blocks")) {
    if (hidden % 32 != 0 || inter % 32 != 0)
      throw Error(ErrorKind::BadFormat,
                  e + "gate_up_proj_blocks: MXFP4 needs hidden and expert widths divisible by 32");
    l.experts.format = ExpertFormat::Mxfp4;
    l.experts.gate_up = w.get_bytes(e + "gate_up_proj_blocks", {n, 2 * inter, hidden / 32, 16}, 2);
    l.experts.gate_up_scales =
        w.get_bytes(e + "gate_up_proj_scales", {n, 2 * inter, hidden / 32}, 2);
    l.experts.down = w.get_bytes(e + "down_proj_blocks", {n, hidden, inter / 32, 16}, 2);
    l.experts.down_scales = w.get_bytes(e + "down_proj_scales", {n, hidden, inter / 32}, 2);
    l.experts.gate_up.cols = hidden;  // logical widths (MoeWeights)
    l.experts.down.cols = inter;
  } else {
    const TensorInfo& gu = w.tensor(e + "gate_up_proj", {n, hidden, 2 * inter});
    const TensorInfo& dn = w.tensor(e + "down_proj", {n, inter, hidden});
    l.experts.gate_up = w.upload_repacked(e + "gate_up_proj", float_dtype(gu, gu.name),
                                          n * 2 * inter, hidden, transpose_experts(gu));
    l.experts.down = w.upload_repacked(e + "down_proj", float_dtype(dn, dn.name), n * hidden, inter,
                                       transpose_experts(dn));
  }
  l.experts.gate_up_bias = w.get(e + "gate_up_proj_bias", {n, 2 * inter});
  l.experts.down_bias = w.get(e + "down_proj_bias", {n, hidden});
  l.params = {.n_experts = n,
              .top_k = m.top_k,
              .inter = inter,
              .gating = MoeGating::TopKSoftmax,
              .act = ExpertActivation::ClampedSwiglu,
              .swiglu_limit = static_cast<float>(m.swiglu_limit),
              .swiglu_alpha = 1.702f,
              .interleaved_gate_up = true};
  return l;
}

void run_moe(const MoeLayerWeights& w, LayerContext& ctx, TensorRef xn) {
  Backend& be = ctx.backend;
  be.matmul(xn, w.router, &w.router_bias, ctx.ws.router);
  be.moe(xn, ctx.ws.router, w.experts, w.params, ctx.ws.moe, ctx.ws.y);
  const std::int64_t inter = w.shared.inter;
  if (inter == 0) return;
  const std::int64_t n = xn.rows;
  be.gated_mlp(xn, w.shared.mlp, GluActivation::Silu,
               ctx.ws.gate_up.rows_slice(0, n).cols_slice(0, 2 * inter),
               ctx.ws.act.rows_slice(0, n).cols_slice(0, inter), ctx.ws.moe_shared);
  be.matmul(xn, w.shared.gate, nullptr, ctx.ws.moe_shared_gate);
  be.sigmoid_mul(ctx.ws.moe_shared, ctx.ws.moe_shared_gate);  // one gate per row
  be.add(ctx.ws.y, ctx.ws.moe_shared);
}

}  // namespace akv
