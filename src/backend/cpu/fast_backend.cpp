#include "backend/cpu/fast_backend.h"

#include <cblas.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/gemm_blas.h"
#include "backend/cpu/host_buffer.h"
#include "backend/cpu/quant_dot.h"
#include "backend/cpu/quant_repack.h"
#include "tensor/safetensors.h"

namespace akv {
namespace {

// Below this many elements an element-wise op runs on the calling thread.
constexpr std::int64_t kParallelElements = 1 << 15;

}  // namespace

bool fast_weight_dtype(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

FastBackend::FastBackend(int n_threads, Isa isa, int spin_micros)
    : isa_(isa), kernels_(kernels_for(isa)), pool_(n_threads, spin_micros), scratch_(pool_.n_threads()) {
  openblas_set_num_threads(1);
}

template <typename Fn>
void FastBackend::for_rows(std::int64_t n_rows, std::int64_t cols, const Fn& fn) {
  if (n_rows * cols < kParallelElements || n_rows < 2) {
    fn(std::int64_t{0}, n_rows);
    return;
  }
  pool_.parallel_for(n_rows, 1, [&fn](std::int64_t b, std::int64_t e) { fn(b, e); });
}

WeightRef FastBackend::upload_weight(const TensorInfo& t) {
  const WeightRef w = ReferenceBackend::upload_weight(t);
  if (!repackable(w.dtype) || w.rows < kRepackRows || find_repacked_dot(isa_, w.dtype) == nullptr)
    return w;
  Repacked r;
  r.size = repacked_bytes(w.dtype, w.rows, w.cols);
  r.bytes = std::make_unique_for_overwrite<std::uint8_t[]>(r.size);
  r.dtype = w.dtype;
  r.rows = w.rows;
  r.cols = w.cols;
  std::uint8_t* bytes = r.bytes.get();
  pool_.parallel_for((w.rows + kRepackRows - 1) / kRepackRows, 1,
                     [&](std::int64_t g0, std::int64_t g1) {
                       repack_groups(w.dtype, w.data, w.rows, w.cols, g0, g1, bytes);
                     });
  repacked_.emplace(bytes, std::move(r));
  return {bytes, w.dtype, w.rows, w.cols};
}

const FastBackend::Repacked* FastBackend::find_repacked(const WeightRef& w) const {
  if (repacked_.empty() || !repackable(w.dtype)) return nullptr;
  const auto* p = static_cast<const std::uint8_t*>(w.data);
  auto it = repacked_.upper_bound(p);
  if (it == repacked_.begin()) return nullptr;
  --it;
  const auto at = reinterpret_cast<std::uintptr_t>(p),
             first = reinterpret_cast<std::uintptr_t>(it->first);
  return at < first + it->second.size ? &it->second : nullptr;
}

FastBackend::QuantKernel FastBackend::quant_kernel(const WeightRef& w) const {
  QuantKernel k;
  if (const Repacked* r = find_repacked(w)) {
    const std::size_t row_bytes = dtype_row_bytes(w.dtype, w.cols);
    const auto offset =
        static_cast<std::size_t>(static_cast<const std::uint8_t*>(w.data) - r->bytes.get());
    AKV_CHECK(r->dtype == w.dtype && r->cols == w.cols && offset % row_bytes == 0 &&
                  static_cast<std::int64_t>(offset / row_bytes) + w.rows <= r->rows,
              "a view of whole rows of a repacked weight");
    k.format = repacked_act_format(w.dtype);
    k.repacked = find_repacked_dot(isa_, w.dtype);
    k.base = r->bytes.get();
    k.first_row = static_cast<std::int64_t>(offset / row_bytes);
    return k;
  }
  k.dot = find_quant_dot(isa_, w.dtype);
  k.format = k.dot != nullptr ? act_format(w.dtype) : ActFormat::None;
  return k;
}

WeightRef FastBackend::gguf_form(const WeightRef& w, std::vector<std::uint8_t>& gguf) const {
  const QuantKernel k = quant_kernel(w);
  if (k.repacked == nullptr) return w;
  const std::size_t row_bytes = dtype_row_bytes(w.dtype, w.cols);
  gguf.resize(row_bytes * static_cast<std::size_t>(w.rows));
  for (std::int64_t r = 0; r < w.rows; ++r)
    unpack_row(w.dtype, k.base, w.cols, k.first_row + r,
               gguf.data() + static_cast<std::size_t>(r) * row_bytes);
  return {gguf.data(), w.dtype, w.rows, w.cols};
}

void FastBackend::embed(const WeightRef& table, std::span<const std::int32_t> ids, float scale,
                        TensorRef out) {
  // A repacked table (tied to lm_head): the looked-up rows back in GGUF blocks, then the oracle.
  if (const QuantKernel k = quant_kernel(table); k.repacked != nullptr) {
    AKV_CHECK(out.dtype == DType::F32 && out.rows == static_cast<std::int64_t>(ids.size()) &&
                  out.cols == table.cols,
              "embed shape");
    embed_row_.resize(dtype_row_bytes(table.dtype, table.cols));
    for (std::int64_t i = 0; i < out.rows; ++i) {
      AKV_CHECK(ids[i] >= 0 && ids[i] < table.rows,
                "token id out of vocabulary (validated upstream)");
      unpack_row(table.dtype, k.base, table.cols, k.first_row + ids[i], embed_row_.data());
      const std::span<float> y(out.row<float>(i), static_cast<std::size_t>(out.cols));
      dequantize_weight_row({embed_row_.data(), table.dtype, 1, table.cols}, 0, y);
      for (float& v : y) v *= scale;
    }
    return;
  }
  // Quantized tables: the reference dequantizes the looked-up rows (one row per token).
  if (!fast_weight_dtype(table.dtype) || out.dtype != DType::F32)
    return ReferenceBackend::embed(table, ids, scale, out);
  AKV_CHECK(out.rows == static_cast<std::int64_t>(ids.size()) && out.cols == table.cols, "embed shape");
  const std::size_t row_bytes = static_cast<std::size_t>(table.cols) * dtype_size(table.dtype);
  for (std::int64_t i = 0; i < out.rows; ++i) {
    AKV_CHECK(ids[i] >= 0 && ids[i] < table.rows, "token id out of vocabulary (validated upstream)");
    float* y = out.row<float>(i);
    kernels_.to_f32(static_cast<const char*>(table.data) + ids[i] * row_bytes, table.dtype, out.cols, y);
    if (scale != 1.0f)
      for (std::int64_t c = 0; c < out.cols; ++c) y[c] *= scale;
  }
}

void FastBackend::rms_norm(TensorRef x, const WeightRef& w, float eps, float weight_offset,
                           TensorRef out) {
  if (x.dtype != DType::F32 || out.dtype != DType::F32 || !fast_weight_dtype(w.dtype))
    return ReferenceBackend::rms_norm(x, w, eps, weight_offset, out);
  const std::int64_t group = w.cols;
  AKV_CHECK(x.cols % group == 0 && out.cols == x.cols && out.rows == x.rows, "rms_norm shape");
  norm_weight_.resize(static_cast<std::size_t>(group));
  kernels_.to_f32(w.data, w.dtype, group, norm_weight_.data());
  for (float& v : norm_weight_) v += weight_offset;
  const float* wf = norm_weight_.data();
  for_rows(x.rows, x.cols, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const float* xr = x.row<float>(r);
      float* yr = out.row<float>(r);
      for (std::int64_t g0 = 0; g0 < x.cols; g0 += group) {
        const float ss = kernels_.sum_squares(xr + g0, group);
        const float inv = 1.0f / std::sqrt(ss / static_cast<float>(group) + eps);
        for (std::int64_t c = 0; c < group; ++c) yr[g0 + c] = xr[g0 + c] * inv * wf[c];
      }
    }
  });
}

void FastBackend::matmul(TensorRef x, const WeightRef& w, const WeightRef* bias, TensorRef out) {
  const bool has_bias = bias != nullptr && !bias->empty();
  if (dtype_is_quantized(w.dtype) && x.dtype == DType::F32 && out.dtype == DType::F32 &&
      (!has_bias || fast_weight_dtype(bias->dtype)))
    return matmul_quantized(x, w, bias, out);
  if (x.dtype != DType::F32 || out.dtype != DType::F32 || !fast_weight_dtype(w.dtype) ||
      (has_bias && !fast_weight_dtype(bias->dtype))) {
    std::vector<std::uint8_t> gguf;
    return ReferenceBackend::matmul(x, gguf_form(w, gguf), bias, out);
  }
  AKV_CHECK(x.cols == w.cols && out.rows == x.rows && out.cols == w.rows, "matmul shape");
  const GemvArgs a{.x = x.row<float>(0), .x_stride = x.stride, .n_rows = x.rows,
                   .w = w.data, .w_dtype = w.dtype, .k = w.cols,
                   .bias = has_bias ? bias->data : nullptr,
                   .bias_dtype = has_bias ? bias->dtype : DType::F32,
                   .out = out.row<float>(0), .out_stride = out.stride};
  if (x.rows == 0 || w.rows == 0) return;
  if (x.rows >= kGemmMinRows) return matmul_blas(pool_, kernels_, scratch_, a, w.rows);
  const Kernels& k = kernels_;
  pool_.parallel_for(w.rows, 16, [&a, &k](std::int64_t b, std::int64_t e) { k.gemv(a, b, e); });
}

void FastBackend::matmul_quantized(TensorRef x, const WeightRef& w, const WeightRef* bias, TensorRef out) {
  AKV_CHECK(x.cols == w.cols && out.rows == x.rows && out.cols == w.rows, "matmul shape");
  if (x.rows == 0 || w.rows == 0) return;
  const bool has_bias = bias != nullptr && !bias->empty();
  const auto add_bias = [&](std::int64_t m, float v) {
    return has_bias ? v + load_f32(bias->data, bias->dtype, m) : v;
  };
  const QuantKernel kernel = quant_kernel(w);
  if (!kernel.found()) {
    // No integer kernel: each weight row dequantized (the oracle) once, f32 dots with every input.
    pool_.parallel_for(w.rows, 16, [&](std::int64_t b, std::int64_t e) {
      thread_local std::vector<float> row;
      row.resize(static_cast<std::size_t>(w.cols));
      for (std::int64_t m = b; m < e; ++m) {
        dequantize_weight_row(w, m, row);
        for (std::int64_t r = 0; r < x.rows; ++r) {
          const float* xr = x.row<float>(r);
          float acc = 0.0f;
          for (std::int64_t k = 0; k < w.cols; ++k) acc += xr[k] * row[static_cast<std::size_t>(k)];
          out.row<float>(r)[m] = add_bias(m, acc);
        }
      }
    });
    return;
  }
  const std::size_t act_bytes = quantize_inputs(x, kernel.format);
  const std::uint8_t* act = act_q8_.data();
  // Each weight row is read once for all inputs (decode: one input; prefill: the inputs'
  // quantized rows stay in cache while the weight rows stream). Chunks of 16 rows: whole
  // groups of a repacked weight.
  pool_.parallel_for(w.rows, 16, [&](std::int64_t b, std::int64_t e) {
    quantized_rows(w, kernel, bias, act, act_bytes, x.rows, out, b, e);
  });
}

std::size_t FastBackend::quantize_inputs(TensorRef x, ActFormat format) {
  const std::size_t act_bytes = act_row_bytes(format, x.cols);
  act_q8_.resize(act_bytes * static_cast<std::size_t>(x.rows));
  for (std::int64_t r = 0; r < x.rows; ++r)
    quantize_act_row(isa_, format, x.row<float>(r), x.cols, act_q8_.data() + static_cast<std::size_t>(r) * act_bytes);
  return act_bytes;
}

void FastBackend::quantized_rows(const WeightRef& w, const QuantKernel& kernel,
                                 const WeightRef* bias, const std::uint8_t* act,
                                 std::size_t act_bytes, std::int64_t n_rows, TensorRef out,
                                 std::int64_t m0, std::int64_t m1) const {
  const std::size_t w_row_bytes = dtype_row_bytes(w.dtype, w.cols);
  const std::int64_t n_blocks = w.cols / dtype_block_elems(w.dtype);
  const auto* w_data = static_cast<const std::uint8_t*>(w.data);
  const bool has_bias = bias != nullptr && !bias->empty();
  // Tiles of weight rows small enough to stay in cache while every input row passes over them
  // (decode: one input row, one tile).
  const std::int64_t tile = n_rows == 1 ? m1 - m0 : kQuantRowTile;
  for (std::int64_t t0 = m0; t0 < m1; t0 += tile) {
    const std::int64_t t1 = std::min(m1, t0 + tile);
    for (std::int64_t r = 0; r < n_rows; ++r) {
      float* y = out.row<float>(r);
      const std::uint8_t* a = act + static_cast<std::size_t>(r) * act_bytes;
      if (kernel.repacked != nullptr)
        dot_repacked_rows(kernel.repacked, kernel.base, w_row_bytes, n_blocks, a,
                          kernel.first_row + t0, kernel.first_row + t1, y + t0);
      else
        kernel.dot(w_data + static_cast<std::size_t>(t0) * w_row_bytes, w_row_bytes, n_blocks, a,
                   t1 - t0, y + t0);
      if (has_bias)
        for (std::int64_t m = t0; m < t1; ++m) y[m] += load_f32(bias->data, bias->dtype, m);
    }
  }
}

bool FastBackend::shared_quantized_input(TensorRef x, std::span<const MatmulTarget> targets) const {
  if (targets.empty() || x.dtype != DType::F32 || x.rows == 0) return false;
  const ActFormat format = quant_kernel(*targets[0].w).format;
  for (const MatmulTarget& t : targets) {
    const WeightRef& w = *t.w;
    const bool has_bias = t.bias != nullptr && !t.bias->empty();
    const QuantKernel k = quant_kernel(w);
    if (!dtype_is_quantized(w.dtype) || !k.found() || k.format != format ||
        t.out.dtype != DType::F32 || (has_bias && !fast_weight_dtype(t.bias->dtype)))
      return false;
    AKV_CHECK(x.cols == w.cols && t.out.rows == x.rows && t.out.cols == w.rows, "matmul_multi shape");
  }
  return true;
}

void FastBackend::matmul_multi(TensorRef x, std::span<const MatmulTarget> targets) {
  if (!shared_quantized_input(x, targets)) {
    for (const MatmulTarget& t : targets) matmul(x, *t.w, t.bias, t.out);
    return;
  }
  target_kernels_.clear();
  for (const MatmulTarget& t : targets) target_kernels_.push_back(quant_kernel(*t.w));
  const std::size_t act_bytes = quantize_inputs(x, target_kernels_[0].format);
  const std::uint8_t* act = act_q8_.data();
  std::int64_t total = 0;
  for (const MatmulTarget& t : targets) total += t.w->rows;
  // The targets' rows end to end: a chunk may span two targets.
  pool_.parallel_for(total, 16, [&](std::int64_t b, std::int64_t e) {
    std::int64_t first = 0;
    for (std::size_t i = 0; i < targets.size(); ++i) {
      const MatmulTarget& t = targets[i];
      const std::int64_t lo = std::max(b, first), hi = std::min(e, first + t.w->rows);
      if (lo < hi)
        quantized_rows(*t.w, target_kernels_[i], t.bias, act, act_bytes, x.rows, t.out, lo - first,
                       hi - first);
      first += t.w->rows;
    }
  });
}

void FastBackend::gated_mlp(TensorRef x, const GatedMlpWeights& w, GluActivation act, TensorRef gate_up,
                            TensorRef act_out, TensorRef out) {
  const std::int64_t inter = act_out.cols, n = x.rows;
  const TensorRef gate = gate_up.cols_slice(0, inter);
  const TensorRef up = gate_up.cols_slice(inter, inter);
  const MatmulTarget targets[] = {{&w.gate, nullptr, gate}, {&w.up, nullptr, up}};
  const MatmulTarget down[] = {{&w.down, nullptr, out}};
  if (!w.gate_up.empty() || gate_up.dtype != DType::F32 || act_out.dtype != DType::F32 || act_out.rows != n ||
      !shared_quantized_input(x, targets) || !shared_quantized_input(act_out, down))
    return Backend::gated_mlp(x, w, act, gate_up, act_out, out);
  AKV_CHECK(gate_up.rows == n && gate_up.cols == 2 * inter && w.gate.rows == inter && w.up.rows == inter,
            "gated_mlp shape");
  const QuantKernel gate_kernel = quant_kernel(w.gate), up_kernel = quant_kernel(w.up);
  const QuantKernel down_kernel = quant_kernel(w.down);
  const std::size_t in_bytes = quantize_inputs(x, gate_kernel.format);
  const ActFormat down_format = down_kernel.format;
  const std::size_t down_bytes = act_row_bytes(down_format, inter);
  act_down_.resize(down_bytes * static_cast<std::size_t>(n));
  // Chunks of whole activation blocks of down's input, so each quantizes its own part of it.
  const std::int64_t grain =
      down_format == ActFormat::Block256 ? 256 : down_format == ActFormat::Pair32 ? 64 : 32;
  const std::size_t grain_bytes = act_row_bytes(down_format, grain);
  const GluKind kind = act == GluActivation::Silu ? GluKind::Silu : GluKind::GeluTanh;
  const std::uint8_t* a_in = act_q8_.data();
  std::uint8_t* a_down = act_down_.data();
  pool_.parallel_for(inter, grain, [&](std::int64_t b, std::int64_t e) {
    quantized_rows(w.gate, gate_kernel, nullptr, a_in, in_bytes, n, gate, b, e);
    quantized_rows(w.up, up_kernel, nullptr, a_in, in_bytes, n, up, b, e);
    for (std::int64_t r = 0; r < n; ++r) {
      float* y = act_out.row<float>(r) + b;
      kernels_.glu(gate.row<float>(r) + b, up.row<float>(r) + b, y, e - b, kind);
      quantize_act_row(isa_, down_format, y, e - b,
                       a_down + static_cast<std::size_t>(r) * down_bytes + static_cast<std::size_t>(b / grain) * grain_bytes);
    }
  });
  pool_.parallel_for(w.down.rows, 16, [&](std::int64_t b, std::int64_t e) {
    quantized_rows(w.down, down_kernel, nullptr, a_down, down_bytes, n, out, b, e);
  });
}

void FastBackend::add(TensorRef acc, TensorRef x) {
  if (acc.dtype != DType::F32 || x.dtype != DType::F32) return ReferenceBackend::add(acc, x);
  AKV_CHECK(acc.rows == x.rows && acc.cols == x.cols, "add shape");
  for_rows(acc.rows, acc.cols, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      float* a = acc.row<float>(r);
      const float* b = x.row<float>(r);
      for (std::int64_t c = 0; c < acc.cols; ++c) a[c] += b[c];
    }
  });
}

void FastBackend::update_rope_table(const RopeParams& rope, std::span<const std::int32_t> positions) {
  RopeTable& t = rope_table_;
  const bool same = t.scaling == rope.attention_scaling &&
                    std::equal(t.inv_freq.begin(), t.inv_freq.end(), rope.inv_freq.begin(),
                               rope.inv_freq.end()) &&
                    std::equal(t.positions.begin(), t.positions.end(), positions.begin(), positions.end());
  if (same) return;
  t.inv_freq.assign(rope.inv_freq.begin(), rope.inv_freq.end());
  t.scaling = rope.attention_scaling;
  t.positions.assign(positions.begin(), positions.end());
  const std::size_t half = t.inv_freq.size();
  t.cos.resize(positions.size() * half);
  t.sin.resize(positions.size() * half);
  for (std::size_t r = 0; r < positions.size(); ++r) {
    for (std::size_t i = 0; i < half; ++i) {
      const double angle = double(positions[r]) * t.inv_freq[i];
      t.cos[r * half + i] = static_cast<float>(std::cos(angle) * t.scaling);
      t.sin[r * half + i] = static_cast<float>(std::sin(angle) * t.scaling);
    }
  }
}

void FastBackend::rope(TensorRef x, std::int64_t head_dim, const RopeParams& rope,
                       std::span<const std::int32_t> positions) {
  if (x.dtype != DType::F32) return ReferenceBackend::rope(x, head_dim, rope, positions);
  AKV_CHECK(x.cols % head_dim == 0 && rope.rotary_dim <= head_dim, "rope shape");
  AKV_CHECK(static_cast<std::int64_t>(positions.size()) == x.rows, "rope positions");
  const std::int64_t half = rope.rotary_dim / 2;
  AKV_CHECK(static_cast<std::int64_t>(rope.inv_freq.size()) >= half, "rope frequencies");
  update_rope_table({rope.inv_freq.first(static_cast<std::size_t>(half)), rope.rotary_dim,
                     rope.attention_scaling},
                    positions);
  const float* cos_t = rope_table_.cos.data();
  const float* sin_t = rope_table_.sin.data();
  for_rows(x.rows, x.cols, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      float* xr = x.row<float>(r);
      const float* c = cos_t + r * half;
      const float* s = sin_t + r * half;
      for (std::int64_t h0 = 0; h0 < x.cols; h0 += head_dim) {
        float* a = xr + h0;
        float* b = xr + h0 + half;
        for (std::int64_t i = 0; i < half; ++i) {
          const float x1 = a[i], x2 = b[i];
          a[i] = x1 * c[i] - x2 * s[i];
          b[i] = x2 * c[i] + x1 * s[i];
        }
      }
    }
  });
}

void FastBackend::attention(TensorRef q, const KvStorage& kv, std::int64_t layer,
                            const ForwardBatch& batch, const AttentionParams& p, TensorRef out) {
  if (q.dtype != DType::F32 || out.dtype != DType::F32 || !fast_weight_dtype(kv.layout.dtype))
    return ReferenceBackend::attention(q, kv, layer, batch, p, out);
  attention_fast(pool_, kernels_, scratch_, attention_, q, kv, layer, batch, p, out);
}

void FastBackend::glu(TensorRef gate, TensorRef up, GluActivation act, TensorRef out) {
  if (gate.dtype != DType::F32 || up.dtype != DType::F32 || out.dtype != DType::F32)
    return ReferenceBackend::glu(gate, up, act, out);
  AKV_CHECK(gate.rows == up.rows && gate.cols == up.cols && out.cols == gate.cols &&
                out.rows == gate.rows, "glu shape");
  const GluKind kind = act == GluActivation::Silu ? GluKind::Silu : GluKind::GeluTanh;
  for_rows(gate.rows, gate.cols, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r)
      kernels_.glu(gate.row<float>(r), up.row<float>(r), out.row<float>(r), gate.cols, kind);
  });
}

void FastBackend::sample_rows(TensorRef logits, std::span<const float> temperature,
                              std::span<const double> u, std::span<std::int32_t> out) {
  const auto n = static_cast<std::size_t>(logits.rows);
  if (logits.dtype != DType::F32 || logits.cols == 0 || out.size() != n ||
      temperature.size() != n || u.size() != n)
    return ReferenceBackend::sample_rows(logits, temperature, u, out);
  for (std::size_t i = 0; i < n; ++i) {
    const float* row = logits.row<float>(static_cast<std::int64_t>(i));
    out[i] = temperature[i] <= 0.0f
                 ? kernels_.argmax(row, logits.cols)
                 : draw_row({row, static_cast<std::size_t>(logits.cols)}, temperature[i], u[i]);
  }
}

void FastBackend::gated_delta_rule(TensorRef qkv, TensorRef a, TensorRef b, const WeightRef& a_log,
                                   const WeightRef& dt_bias, KvStorage& kv, std::int64_t layer,
                                   const ForwardBatch& batch, TensorRef out) {
  const StateLayout& st = kv.state;
  AKV_CHECK(out.rows == qkv.rows && out.cols == st.n_v_heads * st.v_head_dim, "gated_delta_rule out shape");
  prepare_delta_rule(qkv, a, b, a_log, dt_bias, st, delta_rule_);
  const auto n_tasks = static_cast<std::int64_t>(batch.sequences.size()) * st.n_v_heads;
  pool_.parallel_for(n_tasks, 1, [&](std::int64_t t0, std::int64_t t1) {
    thread_local std::vector<float> scratch;
    for (std::int64_t t = t0; t < t1; ++t) {
      const SequenceChunk& s = batch.sequences[static_cast<std::size_t>(t / st.n_v_heads)];
      const std::int64_t h = t % st.n_v_heads;
      const DeltaRuleInputs in = delta_rule_inputs(delta_rule_, qkv, st, s, h);
      float* state = delta_rule_state(kv, layer, s, h);
      float* o = out.row<float>(s.first_row) + h * st.v_head_dim;
      if (s.n_tokens == 1)
        delta_rule_recurrent(in, state, o, out.stride);
      else
        delta_rule_chunked(in, state, o, out.stride, kDeltaRuleChunk, scratch);
    }
  });
}

}  // namespace akv
