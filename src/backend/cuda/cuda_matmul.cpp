// CudaBackend's matmuls (cuda_backend.h): half-precision GEMMs through cuBLASLt with cached
// algorithms (gemm_plans.h) and their start-up warm-up, the GEMV and skinny kernels for few rows,
// GGUF block weights (GEMV or int8 tensor-core kernel on the raw blocks, or a bf16 copy then
// cuBLAS), and the gated MLP.
#include <algorithm>
#include <optional>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_plans.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/op_signature.h"
#include "backend/cuda/quant_dequant.h"
#include "backend/cuda/quant_gemv.h"

namespace akv {

using cuda::Sig;
using enum cuda::OpKind;

namespace {

// Whether gated_mlp can keep its intermediates in half: the cuBLAS path (more rows than the
// GEMV takes) with gate/up and down all BF16 or all F16.
bool half_mlp(TensorRef x, const GatedMlpWeights& w) {
  const DType t = w.down.dtype;
  if (x.rows <= cuda::kGemvMaxRows || (t != DType::BF16 && t != DType::F16)) return false;
  return w.gate_up.empty() ? w.gate.dtype == t && w.up.dtype == t : w.gate_up.dtype == t;
}

}  // namespace

void CudaBackend::gemm(TensorRef x, const void* xh, const WeightRef& w, TensorRef out) {
  const int m = static_cast<int>(w.rows), n = static_cast<int>(x.rows),
            k = static_cast<int>(w.cols);
  const float one = 1.0f, zero = 0.0f;
  if (w.dtype == DType::F32) {
    AKV_CUBLAS_CHECK(cublasSgemm(
        blas_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, static_cast<const float*>(w.data), k,
        static_cast<const float*>(x.data), static_cast<int>(x.stride), &zero,
        static_cast<float*>(out.data), static_cast<int>(out.stride)));
  } else {
    gemm_half(xh, k, x.rows, w, out.data, DType::F32, out.stride);
  }
}

void CudaBackend::note_gemm_weight(const WeightRef& w) {
  if (w.rows < 2) return;  // vectors: norms, biases
  GemmWeight g{.data = w.data, .rows = w.rows, .cols = w.cols, .dtype = w.dtype};
  if (dtype_is_quantized(w.dtype)) {  // matmul_dequantized: row chunks of bf16 in dequant_scratch_
    g = {.data = nullptr,
         .rows = std::min(w.rows, std::max<std::int64_t>(1, dequant_chunk_elems_ / w.cols)),
         .cols = w.cols,
         .dtype = DType::BF16};
  } else if (w.dtype != DType::BF16 && w.dtype != DType::F16) {
    return;
  }
  const bool seen =
      std::any_of(gemm_weights_.begin(), gemm_weights_.end(), [&](const GemmWeight& s) {
        return s.rows == g.rows && s.cols == g.cols && s.dtype == g.dtype &&
               (s.data == nullptr) == (g.data == nullptr);
      });
  if (!seen) gemm_weights_.push_back(g);
}

void CudaBackend::warm_up(std::int64_t max_rows) {
  // Every class of rows the half GEMMs take (above the GEMV's), for each weight shape; the
  // output buffer is bounded, so a vocabulary-wide weight (the LM head: logits of a few rows)
  // warms only its smaller classes.
  if (gemm_weights_.empty() || max_rows <= cuda::kGemvMaxRows) return;
  constexpr std::int64_t kOutFloats = std::int64_t{128} << 20;  // 512 MiB
  std::int64_t a_elems = 0, out_elems = 0;
  auto rows_for = [&](const GemmWeight& g) {  // the top class warmed: the buffers hold it
    return cuda::GemmPlans::class_rows(
        std::min(max_rows, std::max<std::int64_t>(64, kOutFloats / g.rows)));
  };
  for (const GemmWeight& g : gemm_weights_) {
    a_elems = std::max(a_elems, rows_for(g) * g.cols);
    out_elems = std::max(out_elems, rows_for(g) * g.rows);
  }
  void *a = nullptr, *out = nullptr;
  AKV_CUDA_CHECK(cudaMalloc(&a, static_cast<std::size_t>(a_elems) * 2));
  AKV_CUDA_CHECK(cudaMalloc(&out, static_cast<std::size_t>(out_elems) * sizeof(float)));
  AKV_CUDA_CHECK(cudaMemsetAsync(a, 0, static_cast<std::size_t>(a_elems) * 2, stream_));
  for (const GemmWeight& g : gemm_weights_)
    gemm_plans_->warm(g.data != nullptr ? g.data : dequant_scratch_, g.rows, g.cols,
                      cuda::blas_type(g.dtype), cuda::kGemvMaxRows + 1, rows_for(g), a, out,
                      stream_);
  AKV_CUDA_CHECK(cudaStreamSynchronize(stream_));
  cudaFree(a);
  cudaFree(out);
}

std::int64_t CudaBackend::gemm_heuristic_queries() const {
  return gemm_plans_->heuristic_queries();
}

void CudaBackend::gemm_half(const void* a, std::int64_t a_stride, std::int64_t n,
                            const WeightRef& w, void* out, DType out_dtype,
                            std::int64_t out_stride) {
  AKV_CHECK(out_dtype == DType::F32 || out_dtype == w.dtype,
            "gemm_half: f32 or weight-dtype output");
  if (n == 0) return;
  if (gemm_plans_->run(w.data, a, a_stride, out, out_stride, w.rows, n, w.cols,
                       cuda::blas_type(w.dtype), cuda::blas_type(out_dtype), stream()))
    return;
  const int m = static_cast<int>(w.rows), k = static_cast<int>(w.cols);
  const float one = 1.0f, zero = 0.0f;
  AKV_CUBLAS_CHECK(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, m, static_cast<int>(n), k, &one,
                                w.data, cuda::blas_type(w.dtype), k, a, cuda::blas_type(w.dtype),
                                static_cast<int>(a_stride), &zero, out, cuda::blas_type(out_dtype),
                                static_cast<int>(out_stride), CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
}

void CudaBackend::skinny(TensorRef x, std::span<const MatmulTarget> targets) {
  cuda::GemvOutput outs[cuda::kGemvMaxTargets];
  std::int64_t rows[cuda::kGemvMaxTargets];
  for (std::size_t i = 0; i < targets.size(); ++i) {
    outs[i] = {targets[i].w, targets[i].out};
    rows[i] = targets[i].w->rows;
  }
  cuda::SkinnyScratch sc;
  sc.partial_floats = cuda::skinny_gemm_partial_floats(x.rows, x.cols, {rows, targets.size()});
  if (sc.partial_floats > 0) {
    sc.partial = static_cast<float*>(scratch(sc.partial_floats * sizeof(float), 2));
    sc.counters = skinny_counters_;
  }
  cuda::launch_skinny_gemm(x, {outs, targets.size()}, sc, stream());
}

void CudaBackend::matmul(TensorRef x, const WeightRef& w, const WeightRef* bias, TensorRef out) {
  const MatmulTarget t{&w, bias, out};
  matmul_multi(x, {&t, 1});
}

void CudaBackend::matmul_multi(TensorRef x, std::span<const MatmulTarget> targets) {
  AKV_CHECK(x.dtype == DType::F32, "matmul: f32 activations");
  bool quantized = false;
  for (const MatmulTarget& t : targets) {
    AKV_CHECK(x.cols == t.w->cols && t.out.rows == x.rows && t.out.cols == t.w->rows,
              "matmul shape");
    AKV_CHECK(t.out.dtype == DType::F32, "matmul: f32 activations");
    quantized = quantized || dtype_is_quantized(t.w->dtype);
  }
  const cuda::QuantActivations* norm_codes = norm_codes_for(x);  // before this op's bump
  ++op_seq_;
  if (x.rows == 0 || targets.empty()) return;
  if (recording()) {
    Sig sig;
    sig.u(kMatmul).t(x);
    for (const MatmulTarget& t : targets)
      sig.w(*t.w).p(t.bias != nullptr ? t.bias->data : nullptr).t(t.out);
    if (replaying(sig.h)) return;
  }
  if (!quantized) {
    matmul_plain(x, targets);
  } else {  // per weight type, one launch of its path for its targets (q/k/v, gate/up)
    // x quantized at most once for each kernel's layout, both in one scratch buffer.
    const std::size_t gemv_bytes = (cuda::quant_activation_bytes(x.rows, x.cols) + 15) / 16 * 16;
    std::uint8_t* quant_scratch = nullptr;
    cuda::QuantActivations a_gemv{}, a_mma{};
    if (decode_fusion_ && x.rows <= quant_rows_.gemv &&
        mixed_gemv(x, targets, norm_codes, quant_scratch)) {
      for (const MatmulTarget& t : targets)
        if (t.bias != nullptr && !t.bias->empty()) cuda::launch_add_bias(t.out, *t.bias, stream());
      return;
    }
    for (std::size_t i = 0; i < targets.size(); ++i) {
      const DType type = targets[i].w->dtype;
      if (!dtype_is_quantized(type)) {
        matmul_plain(x, {&targets[i], 1});
        continue;
      }
      bool seen = false;  // launched with an earlier target of its type
      for (std::size_t j = 0; j < i; ++j) seen = seen || targets[j].w->dtype == type;
      if (seen) continue;
      const QuantPath path = quant_matmul_path(type, x.rows);
      if (path == QuantPath::Dequant) {
        for (std::size_t j = i; j < targets.size(); ++j)
          if (targets[j].w->dtype == type) matmul_dequantized(x, *targets[j].w, targets[j].out);
        continue;
      }
      if (quant_scratch == nullptr)
        quant_scratch = static_cast<std::uint8_t*>(
            scratch(gemv_bytes + cuda::quant_mma_activation_bytes(x.rows, x.cols), 6));
      const auto* xf = static_cast<const float*>(x.data);
      if (path == QuantPath::Gemv && a_gemv.codes == nullptr) {
        if (norm_codes != nullptr) {  // the norm that wrote x wrote its codes too
          a_gemv = *norm_codes;
        } else {
          a_gemv = cuda::quant_activations_in(quant_scratch, x.rows, x.cols);
          cuda::launch_quantize_activations(xf, x.stride, x.rows, x.cols, a_gemv, stream());
        }
      }
      if (path == QuantPath::Mma && a_mma.codes == nullptr) {
        a_mma = cuda::quant_mma_activations_in(quant_scratch + gemv_bytes, x.rows, x.cols);
        cuda::launch_quantize_mma_activations(xf, x.stride, x.rows, x.cols, a_mma, stream());
      }
      auto launch = [&](const cuda::QuantTarget* group, int k) {
        if (path == QuantPath::Mma)
          cuda::launch_quant_mma_multi(group, k, a_mma, x.rows, stream());
        else
          cuda::launch_quant_gemv_multi(group, k, a_gemv, x.rows, stream());
      };
      cuda::QuantTarget group[cuda::kQuantGemvMaxTargets];
      int k = 0;
      for (std::size_t j = i; j < targets.size(); ++j) {
        if (targets[j].w->dtype != type) continue;
        if (k == cuda::kQuantGemvMaxTargets) {
          launch(group, k);
          k = 0;
        }
        group[k++] = {quant_weight(*targets[j].w), static_cast<float*>(targets[j].out.data),
                      targets[j].out.stride};
      }
      launch(group, k);
    }
  }
  for (const MatmulTarget& t : targets)
    if (t.bias != nullptr && !t.bias->empty()) cuda::launch_add_bias(t.out, *t.bias, stream());
}

bool CudaBackend::mixed_gemv(TensorRef x, std::span<const MatmulTarget> targets,
                             const cuda::QuantActivations* norm_codes,
                             std::uint8_t*& quant_scratch) {
  if (targets.size() < 2 || targets.size() > static_cast<std::size_t>(cuda::kQuantGemvMaxTargets))
    return false;
  std::optional<GgmlType> first, second;  // the pair's order: quant_gemv_mixes
  for (const MatmulTarget& t : targets) {
    const std::optional<GgmlType> g = find_ggml_type_of(t.w->dtype);
    if (!g.has_value() || quant_matmul_path(t.w->dtype, x.rows) != QuantPath::Gemv) return false;
    if (*g == GgmlType::Q6_K) {
      second = g;
    } else if (!first.has_value() || *first == *g) {
      first = g;
    } else {
      return false;  // a third type
    }
  }
  if (!first.has_value() || !second.has_value() ||
      !cuda::quant_gemv_mixes(*first, *second, x.cols, x.rows))
    return false;
  cuda::QuantTarget group[cuda::kQuantGemvMaxTargets];
  int k = 0, n_first = 0;
  for (const bool want_first : {true, false})
    for (const MatmulTarget& t : targets)
      if ((find_ggml_type_of(t.w->dtype) == first) == want_first) {
        group[k++] = {quant_weight(*t.w), static_cast<float*>(t.out.data), t.out.stride};
        n_first += want_first ? 1 : 0;
      }
  cuda::QuantActivations a{};
  if (norm_codes != nullptr) {
    a = *norm_codes;
  } else {
    if (quant_scratch == nullptr)
      quant_scratch =
          static_cast<std::uint8_t*>(scratch(cuda::quant_activation_bytes(x.rows, x.cols), 6));
    a = cuda::quant_activations_in(quant_scratch, x.rows, x.cols);
    cuda::launch_quantize_activations(static_cast<const float*>(x.data), x.stride, x.rows, x.cols,
                                      a, stream());
  }
  cuda::launch_quant_gemv_mixed(group, k, n_first, a, x.rows, stream());
  return true;
}

void CudaBackend::set_quant_matmul_rows(QuantMatmulRows r) {
  AKV_CHECK(r.gemv >= 0 && r.gemv <= cuda::kQuantGemvMaxRows && r.mma >= 0 &&
                r.mma <= cuda::kQuantMmaMaxRows,
            "quantized matmul rows: the GEMV takes up to 64 rows, the MMA kernel 64");
  quant_rows_ = r;
}

CudaBackend::QuantPath CudaBackend::quant_matmul_path(DType w, std::int64_t n) const {
  const std::optional<GgmlType> t = find_ggml_type_of(w);
  const bool mma = t.has_value() && cuda::quant_mma_supports(*t);
  if (mma && n > quant_rows_.gemv && n <= quant_rows_.mma) return QuantPath::Mma;
  if (n <= (mma ? quant_rows_.gemv : kQuantGemvRows)) return QuantPath::Gemv;
  return QuantPath::Dequant;
}

void CudaBackend::matmul_dequantized(TensorRef x, const WeightRef& w, TensorRef out) {
  const cuda::QuantWeight qw = quant_weight(w);
  // The bf16 rows go through the one dequant scratch matrix (sized at upload, never reallocated
  // inside a step): recorded steps replay on the one stream, so their uses never overlap.
  const std::int64_t chunk_rows = std::min<std::int64_t>(
      w.rows,
      static_cast<std::int64_t>(dequant_scratch_bytes_ / (static_cast<std::size_t>(w.cols) * 2)));
  AKV_CHECK(chunk_rows >= 1, "dequant scratch smaller than a row (sized at upload)");
  void* xh = scratch(static_cast<std::size_t>(x.rows * x.cols) * 2, 0);
  cuda::launch_to_half(x, DType::BF16, xh, stream());
  const std::size_t row_bytes = dtype_row_bytes(w.dtype, w.cols);
  for (std::int64_t r0 = 0; r0 < w.rows; r0 += chunk_rows) {  // out[:, r0 : r0 + m] per chunk
    const std::int64_t m = std::min(chunk_rows, w.rows - r0);
    const cuda::QuantWeight part{
        static_cast<const std::uint8_t*>(w.data) + static_cast<std::size_t>(r0) * row_bytes,
        qw.type, m, w.cols};
    cuda::launch_dequantize_bf16(part, dequant_scratch_, stream());
    gemm_half(xh, x.cols, x.rows, WeightRef{dequant_scratch_, DType::BF16, m, w.cols},
              static_cast<float*>(out.data) + r0, DType::F32, out.stride);
  }
}

void CudaBackend::matmul_plain(TensorRef x, std::span<const MatmulTarget> targets) {
  bool one_launch = targets.size() <= static_cast<std::size_t>(cuda::kGemvMaxTargets);
  for (const MatmulTarget& t : targets)
    one_launch = one_launch && t.w->dtype == targets[0].w->dtype;
  cuda::GemvOutput outs[cuda::kGemvMaxTargets];
  bool skinny_ok = one_launch && x.rows >= 2;
  if (skinny_ok) {
    for (std::size_t i = 0; i < targets.size(); ++i) outs[i] = {targets[i].w, targets[i].out};
    skinny_ok = cuda::skinny_gemm_supported(x, {outs, targets.size()});
  }
  if (skinny_ok) {
    skinny(x, targets);
  } else if (x.rows <= cuda::kGemvMaxRows) {
    if (one_launch) {
      for (std::size_t i = 0; i < targets.size(); ++i) outs[i] = {targets[i].w, targets[i].out};
      cuda::launch_gemv(x, {outs, targets.size()}, stream());
    } else {
      for (const MatmulTarget& t : targets) {
        outs[0] = {t.w, t.out};
        cuda::launch_gemv(x, {outs, 1}, stream());
      }
    }
  } else {
    // x is rounded to a half type once for all targets of that weight dtype.
    void* xh = nullptr;
    DType xh_dtype = DType::F32;
    for (const MatmulTarget& t : targets) {
      if (t.w->dtype != DType::F32 && t.w->dtype != xh_dtype) {
        xh = scratch(static_cast<std::size_t>(x.rows * x.cols) * 2, 0);
        cuda::launch_to_half(x, t.w->dtype, xh, stream());
        xh_dtype = t.w->dtype;
      }
      gemm(x, xh, *t.w, t.out);
    }
  }
}

void CudaBackend::gated_mlp(TensorRef x, const GatedMlpWeights& w, GluActivation act,
                            TensorRef gate_up, TensorRef act_out, TensorRef out) {
  if (decode_fusion_ && dtype_is_quantized(w.down.dtype) &&
      quant_matmul_path(w.down.dtype, x.rows) == QuantPath::Gemv &&
      act_out.cols % cuda::kQuantGroup == 0 && act_out.dtype == DType::F32 &&
      gate_up.dtype == DType::F32 && out.dtype == DType::F32) {
    gated_mlp_quantized(x, w, act, gate_up, act_out, out);
    return;
  }
  if (!half_mlp(x, w)) {  // the unfused ops, each recorded on its own inside a step
    Backend::gated_mlp(x, w, act, gate_up, act_out, out);
    return;
  }
  ++op_seq_;  // see norm_codes_
  const std::int64_t n = x.rows, k = x.cols, inter = act_out.cols;
  const bool fused = !w.gate_up.empty();
  AKV_CHECK(x.dtype == DType::F32 && gate_up.dtype == DType::F32 && act_out.dtype == DType::F32 &&
                out.dtype == DType::F32,
            "gated_mlp: f32 activations");
  AKV_CHECK(gate_up.rows == n && act_out.rows == n && out.rows == n && gate_up.cols == 2 * inter,
            "gated_mlp shape");
  AKV_CHECK(fused
                ? w.gate_up.rows == 2 * inter && w.gate_up.cols == k
                : w.gate.rows == inter && w.up.rows == inter && w.gate.cols == k && w.up.cols == k,
            "gated_mlp: gate/up weight shape");
  AKV_CHECK(w.down.cols == inter && out.cols == w.down.rows, "gated_mlp: down weight shape");
  if (recording() && replaying(Sig()
                                   .u(kGatedMlp)
                                   .t(x)
                                   .w(w.gate_up)
                                   .w(w.gate)
                                   .w(w.up)
                                   .w(w.down)
                                   .u(act == GluActivation::GeluTanh)
                                   .t(gate_up)
                                   .t(act_out)
                                   .t(out)
                                   .h))
    return;
  const DType t = w.down.dtype;
  constexpr std::size_t kHalfBytes = 2;
  void* xh = scratch(static_cast<std::size_t>(n * k) * kHalfBytes, 0);
  cuda::launch_to_half(x, t, xh, stream());
  // Half data needs half the bytes of the caller's f32 buffers: reuse them when contiguous.
  void* gu = gate_up.stride == gate_up.cols
                 ? gate_up.data
                 : scratch(static_cast<std::size_t>(n * 2 * inter) * kHalfBytes, 4);
  void* ah = act_out.stride == act_out.cols
                 ? act_out.data
                 : scratch(static_cast<std::size_t>(n * inter) * kHalfBytes, 5);
  const TensorRef gu_h{gu, t, n, 2 * inter, 2 * inter};  // [n, 2 * inter]: gate, then up
  const TensorRef act_h{ah, t, n, inter, inter};         // [n, inter]
  if (fused) {
    gemm_half(xh, k, n, w.gate_up, gu_h.data, t, gu_h.stride);
  } else {
    gemm_half(xh, k, n, w.gate, gu_h.cols_slice(0, inter).data, t, gu_h.stride);
    gemm_half(xh, k, n, w.up, gu_h.cols_slice(inter, inter).data, t, gu_h.stride);
  }
  cuda::launch_glu_half(gu_h.cols_slice(0, inter), gu_h.cols_slice(inter, inter),
                        act == GluActivation::GeluTanh, act_h, stream());
  gemm_half(act_h.data, act_h.stride, n, w.down, out.data, DType::F32, out.stride);
}

void CudaBackend::gated_mlp_quantized(TensorRef x, const GatedMlpWeights& w, GluActivation act,
                                      TensorRef gate_up, TensorRef act_out, TensorRef out) {
  const std::int64_t n = x.rows, inter = act_out.cols;
  AKV_CHECK(gate_up.rows == n && act_out.rows == n && out.rows == n && gate_up.cols == 2 * inter,
            "gated_mlp shape");
  AKV_CHECK(w.down.cols == inter && out.cols == w.down.rows, "gated_mlp: down weight shape");
  const TensorRef gate = gate_up.cols_slice(0, inter);
  const TensorRef up = gate_up.cols_slice(inter, inter);
  if (!w.gate_up.empty()) {  // recorded as a matmul of its own; takes the norm's codes of x
    matmul(x, w.gate_up, nullptr, gate_up);
  } else {
    const MatmulTarget targets[] = {{&w.gate, nullptr, gate}, {&w.up, nullptr, up}};
    matmul_multi(x, targets);
  }
  ++op_seq_;  // see norm_codes_
  if (n == 0) return;
  if (recording() && replaying(Sig()
                                   .u(kGluDown)
                                   .t(gate)
                                   .t(up)
                                   .u(act == GluActivation::GeluTanh)
                                   .t(act_out)
                                   .w(w.down)
                                   .t(out)
                                   .h))
    return;
  const cuda::QuantActivations a =
      cuda::quant_activations_in(scratch(cuda::quant_activation_bytes(n, inter), 6), n, inter);
  cuda::launch_glu_quantize(gate, up, act == GluActivation::GeluTanh, act_out, a, stream());
  const cuda::QuantTarget down{quant_weight(w.down), static_cast<float*>(out.data), out.stride};
  cuda::launch_quant_gemv_multi(&down, 1, a, n, stream());
}

}  // namespace akv
