#include "backend/cpu/reference_backend.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/host_buffer.h"
#include "tensor/dequantize.h"
#include "tensor/safetensors.h"

namespace akv {

float silu(float x) { return x / (1.0f + std::exp(-x)); }

float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}

// Row r of a quantized weight as f32 through the oracle; `row` has w.cols elements.
void dequantize_weight_row(const WeightRef& w, std::int64_t r, std::span<float> row) {
  const std::size_t row_bytes = dtype_row_bytes(w.dtype, w.cols);
  const auto* base = static_cast<const std::uint8_t*>(w.data) + static_cast<std::size_t>(r) * row_bytes;
  dequantize(*find_ggml_type_of(w.dtype), {base, row_bytes}, row);
}

WeightRef ReferenceBackend::upload_weight(const TensorInfo& t) {
  AKV_CHECK(t.shape.size() == 1 || t.shape.size() == 2, "weights are vectors or matrices");
  const std::int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1;
  const std::int64_t cols = t.shape.back();
  return {t.bytes.data(), t.dtype, rows, cols};
}

std::unique_ptr<DeviceBuffer> ReferenceBackend::alloc(DType dtype, std::int64_t rows, std::int64_t cols) {
  return std::make_unique<HostBuffer>(dtype, rows, cols);
}

KvStorage ReferenceBackend::alloc_kv(const KvLayout& layout) {
  return alloc_kv_arrays(*this, layout);
}

void ReferenceBackend::download(TensorRef x, std::span<float> host) {
  AKV_CHECK(static_cast<std::int64_t>(host.size()) == x.rows * x.cols, "download size mismatch");
  for (std::int64_t r = 0; r < x.rows; ++r)
    for (std::int64_t c = 0; c < x.cols; ++c) host[r * x.cols + c] = load_f32(x.row<void>(r), x.dtype, c);
}

void ReferenceBackend::upload(std::span<const float> host, TensorRef x) {
  AKV_CHECK(static_cast<std::int64_t>(host.size()) == x.rows * x.cols, "upload size mismatch");
  for (std::int64_t r = 0; r < x.rows; ++r)
    for (std::int64_t c = 0; c < x.cols; ++c) store_f32(x.row<void>(r), x.dtype, c, host[r * x.cols + c]);
}

void ReferenceBackend::copy_kv_block(KvStorage& kv, std::int32_t src, std::int32_t dst) {
  const KvLayout& L = kv.layout;
  AKV_CHECK(src >= 0 && dst >= 0 && src < L.n_blocks && dst < L.n_blocks, "block id out of range");
  const std::size_t bytes =
      static_cast<std::size_t>(L.block_size * L.row_width()) * dtype_size(L.dtype);
  for (std::int64_t l = 0; l < L.n_layers; ++l) {
    for (const TensorRef* side : {&kv.k[l], &kv.v[l]})
      std::memcpy(side->row<char>(std::int64_t{dst} * L.block_size),
                  side->row<char>(std::int64_t{src} * L.block_size), bytes);
  }
}

void ReferenceBackend::read_kv_block(const KvStorage& kv, std::int32_t block, std::span<std::byte> host) {
  const KvLayout& L = kv.layout;
  AKV_CHECK(block >= 0 && block < L.n_blocks, "block id out of range");
  AKV_CHECK(static_cast<std::int64_t>(host.size()) == L.block_bytes(), "read_kv_block: host size");
  const std::size_t bytes = host.size() / static_cast<std::size_t>(2 * L.n_layers);
  std::byte* out = host.data();
  for (std::int64_t l = 0; l < L.n_layers; ++l) {
    for (const TensorRef* side : {&kv.k[l], &kv.v[l]}) {
      std::memcpy(out, side->row<char>(std::int64_t{block} * L.block_size), bytes);
      out += bytes;
    }
  }
}

void ReferenceBackend::write_kv_block(KvStorage& kv, std::int32_t block, std::span<const std::byte> host) {
  const KvLayout& L = kv.layout;
  AKV_CHECK(block >= 0 && block < L.n_blocks, "block id out of range");
  AKV_CHECK(static_cast<std::int64_t>(host.size()) == L.block_bytes(), "write_kv_block: host size");
  const std::size_t bytes = host.size() / static_cast<std::size_t>(2 * L.n_layers);
  const std::byte* in = host.data();
  for (std::int64_t l = 0; l < L.n_layers; ++l) {
    for (const TensorRef* side : {&kv.k[l], &kv.v[l]}) {
      std::memcpy(side->row<char>(std::int64_t{block} * L.block_size), in, bytes);
      in += bytes;
    }
  }
}

void ReferenceBackend::embed(const WeightRef& table, std::span<const std::int32_t> ids, float scale,
                             TensorRef out) {
  AKV_CHECK(out.rows == static_cast<std::int64_t>(ids.size()) && out.cols == table.cols, "embed shape");
  if (dtype_is_quantized(table.dtype)) {
    for (std::int64_t i = 0; i < out.rows; ++i) {
      AKV_CHECK(ids[i] >= 0 && ids[i] < table.rows, "token id out of vocabulary (validated upstream)");
      const std::span<float> y(out.row<float>(i), static_cast<std::size_t>(out.cols));
      dequantize_weight_row(table, ids[i], y);
      for (float& v : y) v *= scale;
    }
    return;
  }
  const std::size_t row_bytes = static_cast<std::size_t>(table.cols) * dtype_size(table.dtype);
  for (std::int64_t i = 0; i < out.rows; ++i) {
    AKV_CHECK(ids[i] >= 0 && ids[i] < table.rows, "token id out of vocabulary (validated upstream)");
    const void* row = static_cast<const char*>(table.data) + ids[i] * row_bytes;
    float* y = out.row<float>(i);
    for (std::int64_t c = 0; c < out.cols; ++c) y[c] = load_f32(row, table.dtype, c) * scale;
  }
}

void ReferenceBackend::rms_norm(TensorRef x, const WeightRef& w, float eps, float weight_offset,
                                TensorRef out) {
  const std::int64_t group = w.cols;
  AKV_CHECK(x.cols % group == 0 && out.cols == x.cols && out.rows == x.rows, "rms_norm shape");
  for (std::int64_t r = 0; r < x.rows; ++r) {
    const float* xr = x.row<float>(r);
    float* yr = out.row<float>(r);
    for (std::int64_t g0 = 0; g0 < x.cols; g0 += group) {
      double ss = 0.0;
      for (std::int64_t c = 0; c < group; ++c) ss += double(xr[g0 + c]) * xr[g0 + c];
      const double inv = 1.0 / std::sqrt(ss / double(group) + eps);
      for (std::int64_t c = 0; c < group; ++c)
        yr[g0 + c] = static_cast<float>(xr[g0 + c] * inv * (load_f32(w.data, w.dtype, c) + weight_offset));
    }
  }
}

void ReferenceBackend::matmul(TensorRef x, const WeightRef& w, const WeightRef* bias, TensorRef out) {
  AKV_CHECK(x.cols == w.cols && out.rows == x.rows && out.cols == w.rows, "matmul shape");
  if (dtype_is_quantized(w.dtype)) return matmul_quantized(x, w, bias, out);
  const std::size_t row_bytes = static_cast<std::size_t>(w.cols) * dtype_size(w.dtype);
  for (std::int64_t r = 0; r < x.rows; ++r) {
    const float* xr = x.row<float>(r);
    float* yr = out.row<float>(r);
    for (std::int64_t m = 0; m < w.rows; ++m) {
      const void* wr = static_cast<const char*>(w.data) + m * row_bytes;
      double acc = 0.0;
      for (std::int64_t k = 0; k < w.cols; ++k) acc += double(xr[k]) * load_f32(wr, w.dtype, k);
      if (bias != nullptr && !bias->empty()) acc += load_f32(bias->data, bias->dtype, m);
      yr[m] = static_cast<float>(acc);
    }
  }
}

// out = x @ dequantize(w)^T (+ bias), each weight row dequantized once, sums in double.
void ReferenceBackend::matmul_quantized(TensorRef x, const WeightRef& w, const WeightRef* bias, TensorRef out) {
  std::vector<float> wr(static_cast<std::size_t>(w.cols));
  for (std::int64_t m = 0; m < w.rows; ++m) {
    dequantize_weight_row(w, m, wr);
    for (std::int64_t r = 0; r < x.rows; ++r) {
      const float* xr = x.row<float>(r);
      double acc = 0.0;
      for (std::int64_t k = 0; k < w.cols; ++k) acc += double(xr[k]) * wr[static_cast<std::size_t>(k)];
      if (bias != nullptr && !bias->empty()) acc += load_f32(bias->data, bias->dtype, m);
      out.row<float>(r)[m] = static_cast<float>(acc);
    }
  }
}

void ReferenceBackend::add(TensorRef acc, TensorRef x) {
  AKV_CHECK(acc.rows == x.rows && acc.cols == x.cols, "add shape");
  for (std::int64_t r = 0; r < acc.rows; ++r) {
    float* a = acc.row<float>(r);
    const float* b = x.row<float>(r);
    for (std::int64_t c = 0; c < acc.cols; ++c) a[c] += b[c];
  }
}

void ReferenceBackend::rope(TensorRef x, std::int64_t head_dim, const RopeParams& rope,
                            std::span<const std::int32_t> positions) {
  AKV_CHECK(x.cols % head_dim == 0 && rope.rotary_dim <= head_dim, "rope shape");
  AKV_CHECK(static_cast<std::int64_t>(positions.size()) == x.rows, "rope positions");
  const std::int64_t half = rope.rotary_dim / 2;
  for (std::int64_t r = 0; r < x.rows; ++r) {
    float* xr = x.row<float>(r);
    for (std::int64_t h0 = 0; h0 < x.cols; h0 += head_dim) {
      for (std::int64_t i = 0; i < half; ++i) {
        const double angle = double(positions[r]) * rope.inv_freq[i];
        const double c = std::cos(angle) * rope.attention_scaling;
        const double s = std::sin(angle) * rope.attention_scaling;
        const double x1 = xr[h0 + i], x2 = xr[h0 + i + half];
        xr[h0 + i] = static_cast<float>(x1 * c - x2 * s);
        xr[h0 + i + half] = static_cast<float>(x2 * c + x1 * s);
      }
    }
  }
}

void ReferenceBackend::store_kv(KvStorage& kv, std::int64_t layer, TensorRef k, TensorRef v,
                                const ForwardBatch& batch) {
  const KvLayout& L = kv.layout;
  AKV_CHECK(k.cols == L.row_width() && v.cols == L.row_width(), "store_kv width");
  for (const SequenceChunk& s : batch.sequences) {
    for (std::int32_t t = 0; t < s.n_tokens; ++t) {
      const std::int64_t row = kv_row(L, s.block_table, s.start_pos + t);
      const std::int64_t src = s.first_row + t;
      for (std::int64_t c = 0; c < L.row_width(); ++c) {
        store_f32(kv.k[layer].row<void>(row), L.dtype, c, k.row<float>(src)[c]);
        store_f32(kv.v[layer].row<void>(row), L.dtype, c, v.row<float>(src)[c]);
      }
    }
  }
}

void ReferenceBackend::attention(TensorRef q, const KvStorage& kv, std::int64_t layer,
                                 const ForwardBatch& batch, const AttentionParams& p, TensorRef out) {
  const KvLayout& L = kv.layout;
  const std::int64_t group = p.n_heads / p.n_kv_heads;
  std::vector<double> scores;
  for (const SequenceChunk& s : batch.sequences) {
    for (std::int32_t t = 0; t < s.n_tokens; ++t) {
      const std::int64_t pos = s.start_pos + t;
      const std::int64_t first = p.window > 0 ? std::max<std::int64_t>(0, pos - p.window + 1) : 0;
      const float* qr = q.row<float>(s.first_row + t);
      float* yr = out.row<float>(s.first_row + t);
      for (std::int64_t h = 0; h < p.n_heads; ++h) {
        const std::int64_t kv_off = (h / group) * p.head_dim;
        scores.assign(pos - first + 1, 0.0);
        double max_score = -INFINITY;
        for (std::int64_t j = first; j <= pos; ++j) {
          const void* kr = kv.k[layer].row<void>(kv_row(L, s.block_table, j));
          double dot = 0.0;
          for (std::int64_t d = 0; d < p.head_dim; ++d)
            dot += double(qr[h * p.head_dim + d]) * load_f32(kr, L.dtype, kv_off + d);
          dot *= p.scale;
          if (p.logit_softcap > 0) dot = p.logit_softcap * std::tanh(dot / p.logit_softcap);
          scores[j - first] = dot;
          max_score = std::max(max_score, dot);
        }
        const double sink = p.sinks.empty() ? -INFINITY : double(load_f32(p.sinks.data, p.sinks.dtype, h));
        max_score = std::max(max_score, sink);
        double sum = std::exp(sink - max_score);  // 0 without a sink
        for (double& sc : scores) sum += (sc = std::exp(sc - max_score));
        for (std::int64_t d = 0; d < p.head_dim; ++d) {
          double acc = 0.0;
          for (std::int64_t j = first; j <= pos; ++j)
            acc += scores[j - first] * load_f32(kv.v[layer].row<void>(kv_row(L, s.block_table, j)), L.dtype, kv_off + d);
          yr[h * p.head_dim + d] = static_cast<float>(acc / sum);
        }
      }
    }
  }
}

void ReferenceBackend::glu(TensorRef gate, TensorRef up, GluActivation act, TensorRef out) {
  AKV_CHECK(gate.rows == up.rows && gate.cols == up.cols && out.cols == gate.cols, "glu shape");
  for (std::int64_t r = 0; r < gate.rows; ++r) {
    const float* g = gate.row<float>(r);
    const float* u = up.row<float>(r);
    float* y = out.row<float>(r);
    for (std::int64_t c = 0; c < gate.cols; ++c)
      y[c] = (act == GluActivation::Silu ? silu(g[c]) : gelu_tanh(g[c])) * u[c];
  }
}

void ReferenceBackend::softcap(TensorRef x, float cap) {
  for (std::int64_t r = 0; r < x.rows; ++r) {
    float* xr = x.row<float>(r);
    for (std::int64_t c = 0; c < x.cols; ++c) xr[c] = cap * std::tanh(xr[c] / cap);
  }
}

void ReferenceBackend::gather_rows(TensorRef x, std::span<const std::int32_t> rows, TensorRef out) {
  AKV_CHECK(out.rows == static_cast<std::int64_t>(rows.size()) && out.cols == x.cols, "gather shape");
  for (std::int64_t i = 0; i < out.rows; ++i)
    std::memcpy(out.row<float>(i), x.row<float>(rows[i]), static_cast<std::size_t>(x.cols) * sizeof(float));
}

void ReferenceBackend::sample_rows(TensorRef logits, std::span<const float> temperature, std::span<const double> u,
                                   std::span<std::int32_t> out) {
  AKV_CHECK(logits.dtype == DType::F32, "sample_rows: F32 logits");
  const auto n = static_cast<std::size_t>(logits.rows);
  AKV_CHECK(out.size() == n && temperature.size() == n && u.size() == n, "sample_rows: one value per row");
  const auto cols = static_cast<std::size_t>(logits.cols);
  for (std::size_t i = 0; i < n; ++i) {
    const std::span<const float> row{logits.row<const float>(static_cast<std::int64_t>(i)), cols};
    out[i] = temperature[i] <= 0.0f ? argmax_row(row) : draw_row(row, temperature[i], u[i]);
  }
}

}  // namespace akv
