// Stacked GGUF experts -> checkpoint expert tensors (see gguf_expert_weights.h).
#include "models/gguf_expert_weights.h"

#include <cstring>
#include <string>

#include "base/check.h"
#include "base/error.h"
#include "tensor/dequantize.h"

namespace akv {

std::span<const std::uint8_t> MappedTensors::keep(std::vector<std::uint8_t> bytes) {
  storage.push_back(std::move(bytes));
  return storage.back();
}

void MappedTensors::add(std::string name, DType dtype, std::vector<std::int64_t> shape,
                        std::span<const std::uint8_t> bytes, const std::string& file) {
  tensors.push_back(TensorInfo{.name = std::move(name),
                               .dtype = dtype,
                               .shape = std::move(shape),
                               .bytes = bytes,
                               .file = file});
}

namespace {

// `bytes` as a tensor of `out` (kept in its storage).
void add(MappedTensors& out, std::string name, DType dtype, std::vector<std::int64_t> shape,
         std::vector<std::uint8_t> bytes, const std::string& file) {
  out.add(std::move(name), dtype, std::move(shape), out.keep(std::move(bytes)), file);
}

// Whether Qwen3-MoE's three stacks keep their GGUF blocks: all quantized, of types the backend
// takes, gate and up of one type (they are stacked into one matrix; down may differ).
bool keep_qwen3_moe_blocks(const GgufTensor* const (&t)[3], const KeepQuantized& keep_quantized) {
  for (const GgufTensor* x : t) {
    const std::optional<DType> d = find_dtype_of(x->type);
    if (!d || !dtype_is_quantized(*d) || !keep_quantized(*d)) return false;
  }
  return t[0]->type == t[1]->type;
}

// Qwen3-MoE: each [E, rows, cols] stack becomes E tensors [rows, cols], slices of the mapping
// when the stored type is `dtype` or the blocks are kept (keep_qwen3_moe_blocks).
void append_qwen3_moe(const GgufReader& g, const ModelConfig& c, const std::string& blk,
                      const std::string& hf, DType dtype, const KeepQuantized& keep_quantized,
                      MappedTensors& out) {
  const std::int64_t n = c.moe.n_experts, hidden = c.hidden_size, inter = c.moe.inter;
  struct Proj {
    const char *gguf, *hf;
    std::int64_t rows, cols;
  };
  const Proj projs[3] = {Proj{"gate", "gate_proj", inter, hidden},
                         Proj{"up", "up_proj", inter, hidden},
                         Proj{"down", "down_proj", hidden, inter}};
  // --fuse-gate-up-exps stacks each expert's gate rows, then its up rows, in ffn_gate_up_exps:
  // gate and up are then the two halves of each expert's slice.
  const GgufTensor* fused = g.find(blk + "ffn_gate_up_exps.weight");
  const GgufTensor* stacks[3];
  for (int i = 0; i < 3; ++i)
    stacks[i] =
        fused != nullptr && i < 2
            ? &gguf_tensor_of_shape(g, blk + "ffn_gate_up_exps.weight", {n, 2 * inter, hidden})
            : &gguf_tensor_of_shape(g, blk + "ffn_" + projs[i].gguf + "_exps.weight",
                                    {n, projs[i].rows, projs[i].cols});
  const bool blocks = keep_qwen3_moe_blocks(stacks, keep_quantized);
  std::span<const std::uint8_t> converted;
  for (int i = 0; i < 3; ++i) {
    const Proj& p = projs[i];
    const GgufTensor& t = *stacks[i];
    std::span<const std::uint8_t> bytes = t.bytes;
    DType stored = dtype;
    if (blocks) {
      stored = *find_dtype_of(t.type);
    } else if (plain_dtype(t.type) != dtype) {
      if (fused == nullptr || i == 0 || i == 2) {
        converted = out.keep(encode_f32(dequantize_tensor(t), dtype));
      }
      bytes = converted;
    }
    const bool half = fused != nullptr && i < 2;  // gate (i = 0) or up (i = 1) of a fused stack
    const std::size_t per_expert = bytes.size() / static_cast<std::size_t>(n);
    const std::size_t size = half ? per_expert / 2 : per_expert;
    const std::size_t offset = half && i == 1 ? size : 0;
    for (std::int64_t e = 0; e < n; ++e)
      out.add(hf + "experts." + std::to_string(e) + "." + p.hf + ".weight", stored,
              {p.rows, p.cols},
              bytes.subspan(static_cast<std::size_t>(e) * per_expert + offset, size), t.file);
  }
}

// ggml MXFP4 rows (blocks of 17 bytes: e8m0 scale, then value j in the low nibble of byte j and
// value j + 16 in its high nibble) -> the released layout: blocks of 16 bytes with values 2k and
// 2k + 1 in byte k's low and high nibble, scales apart.
void unpack_mxfp4_row(const std::uint8_t* src, std::int64_t n_blocks, std::uint8_t* blocks,
                      std::uint8_t* scales) {
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const std::uint8_t* blk = src + b * 17;
    scales[b] = blk[0];
    const std::uint8_t* qs = blk + 1;
    const auto code = [qs](int j) { return j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4; };
    for (int k = 0; k < 16; ++k)
      blocks[b * 16 + k] = static_cast<std::uint8_t>(code(2 * k) | (code(2 * k + 1) << 4));
  }
}

// GPT-OSS MXFP4: [E, rows, cols] ggml stacks -> *_blocks [E, rows, cols / 32, 16] and *_scales
// [E, rows, cols / 32]; with two stacks (gate, up) their rows interleave (gate j at 2j).
void add_mxfp4(MappedTensors& out, const std::string& name,
               std::span<const GgufTensor* const> parts, std::int64_t n, std::int64_t rows_each,
               std::int64_t cols) {
  const std::int64_t n_blocks = cols / 32, n_parts = static_cast<std::int64_t>(parts.size());
  const std::int64_t rows = rows_each * n_parts;
  std::vector<std::uint8_t> blocks(static_cast<std::size_t>(n * rows * n_blocks * 16));
  std::vector<std::uint8_t> scales(static_cast<std::size_t>(n * rows * n_blocks));
  for (std::int64_t e = 0; e < n; ++e)
    for (std::int64_t r = 0; r < rows_each; ++r)
      for (std::int64_t p = 0; p < n_parts; ++p) {
        const std::int64_t src_row = e * rows_each + r, dst_row = e * rows + r * n_parts + p;
        unpack_mxfp4_row(parts[p]->bytes.data() + src_row * n_blocks * 17, n_blocks,
                         blocks.data() + dst_row * n_blocks * 16,
                         scales.data() + dst_row * n_blocks);
      }
  add(out, name + "_blocks", DType::U8, {n, rows, n_blocks, 16}, std::move(blocks), parts[0]->file);
  add(out, name + "_scales", DType::U8, {n, rows, n_blocks}, std::move(scales), parts[0]->file);
}

void append_gpt_oss(const GgufReader& g, const ModelConfig& c, const std::string& blk,
                    const std::string& hf, DType dtype, MappedTensors& out) {
  const std::int64_t n = c.moe.n_experts, hidden = c.hidden_size, inter = c.moe.inter;
  const GgufTensor& gate =
      gguf_tensor_of_shape(g, blk + "ffn_gate_exps.weight", {n, inter, hidden});
  const GgufTensor& up = gguf_tensor_of_shape(g, blk + "ffn_up_exps.weight", {n, inter, hidden});
  const GgufTensor& down =
      gguf_tensor_of_shape(g, blk + "ffn_down_exps.weight", {n, hidden, inter});
  const std::string e = hf + "experts.";
  const int n_mxfp4 = (gate.type == GgmlType::MXFP4) + (up.type == GgmlType::MXFP4) +
                      (down.type == GgmlType::MXFP4);
  if (n_mxfp4 == 3) {
    const GgufTensor* gate_up[] = {&gate, &up};
    const GgufTensor* down_only[] = {&down};
    add_mxfp4(out, e + "gate_up_proj", gate_up, n, inter, hidden);
    add_mxfp4(out, e + "down_proj", down_only, n, hidden, inter);
  } else if (n_mxfp4 != 0) {
    throw Error(ErrorKind::Unsupported,
                gate.file + ": " + blk + "ffn_{gate,up,down}_exps mix MXFP4 with other types");
  } else {
    // The converter transposed to [E, out, in] and split gate/up; the checkpoint is
    // [E, in, out] with gate j at column 2j and up j at 2j + 1.
    const std::vector<float> gv = dequantize_tensor(gate), uv = dequantize_tensor(up),
                             dv = dequantize_tensor(down);
    std::vector<float> gate_up(gv.size() * 2), down_t(dv.size());
    for (std::int64_t x = 0; x < n; ++x)
      for (std::int64_t j = 0; j < inter; ++j)
        for (std::int64_t i = 0; i < hidden; ++i) {
          const std::size_t src = static_cast<std::size_t>((x * inter + j) * hidden + i);
          const std::size_t dst = static_cast<std::size_t>((x * hidden + i) * 2 * inter + 2 * j);
          gate_up[dst] = gv[src];
          gate_up[dst + 1] = uv[src];
          down_t[static_cast<std::size_t>((x * inter + j) * hidden + i)] =
              dv[static_cast<std::size_t>((x * hidden + i) * inter + j)];
        }
    add(out, e + "gate_up_proj", dtype, {n, hidden, 2 * inter}, encode_f32(gate_up, dtype),
        gate.file);
    add(out, e + "down_proj", dtype, {n, inter, hidden}, encode_f32(down_t, dtype), down.file);
  }
  const std::vector<float> gb =
      dequantize_tensor(gguf_tensor_of_shape(g, blk + "ffn_gate_exps.bias", {n, inter}));
  const std::vector<float> ub =
      dequantize_tensor(gguf_tensor_of_shape(g, blk + "ffn_up_exps.bias", {n, inter}));
  std::vector<float> gate_up_bias(gb.size() * 2);
  for (std::size_t i = 0; i < gb.size(); ++i) {
    gate_up_bias[2 * i] = gb[i];
    gate_up_bias[2 * i + 1] = ub[i];
  }
  add(out, e + "gate_up_proj_bias", dtype, {n, 2 * inter}, encode_f32(gate_up_bias, dtype),
      gate.file);
  const GgufTensor& db = gguf_tensor_of_shape(g, blk + "ffn_down_exps.bias", {n, hidden});
  add(out, e + "down_proj_bias", dtype, {n, hidden}, encode_f32(dequantize_tensor(db), dtype),
      db.file);
}

}  // namespace

const GgufTensor& gguf_tensor_of_shape(const GgufReader& g, const std::string& name,
                                       const std::vector<std::int64_t>& shape) {
  const GgufTensor& t = g.get_or_throw(name);
  if (t.shape() != shape) {
    std::string want;
    for (const std::int64_t d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
    throw Error(ErrorKind::BadFormat,
                t.file + ": tensor '" + name + "' has the wrong shape (expected [" + want + "])");
  }
  return t;
}

std::optional<DType> plain_dtype(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return DType::F32;
    case GgmlType::F16:
      return DType::F16;
    case GgmlType::BF16:
      return DType::BF16;
    default:
      return std::nullopt;
  }
}

std::vector<std::uint8_t> encode_f32(std::span<const float> v, DType dtype) {
  std::vector<std::uint8_t> out(v.size() * dtype_size(dtype));
  if (dtype == DType::F32) {
    std::memcpy(out.data(), v.data(), out.size());
  } else {
    AKV_CHECK(dtype == DType::BF16 || dtype == DType::F16, "weights load as F32, BF16 or F16");
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::uint16_t h = dtype == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

void append_gguf_experts(const GgufReader& g, const ModelConfig& c, std::int64_t layer, DType dtype,
                         const KeepQuantized& keep_quantized, MappedTensors& out) {
  const std::string blk = "blk." + std::to_string(layer) + ".";
  const std::string hf = "model.layers." + std::to_string(layer) + ".mlp.";
  AKV_CHECK(c.family == Family::Qwen3Moe || c.family == Family::GptOss || is_hybrid(c.family),
            "append_gguf_experts: an MoE family");
  if (c.family == Family::GptOss)
    append_gpt_oss(g, c, blk, hf, dtype, out);
  else  // Qwen3-MoE, and the hybrids' routed experts (their shared expert maps 1:1)
    append_qwen3_moe(g, c, blk, hf, dtype, keep_quantized, out);
}

}  // namespace akv
