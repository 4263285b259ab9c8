// CudaBackend::moe: Backend::moe on the device (kernels in moe_route.cu, moe_decode_pipelined.cu
// or moe_decode.cu, moe_prefill.cu, and the per-pair baseline in moe.cu). Decode (at most kMoeDecodeMaxRows rows,
// and every recorded step) routes and runs the experts without a host round trip; larger eager
// batches sort the (token, choice) pairs by expert and multiply each expert's rows on the tensor
// cores through cuBLAS, after one host wait for the experts' row counts. GGUF-block experts, and
// MXFP4 experts by default: moe_decode_quant.cu for decode (int8 activations, dp4a); each
// non-empty expert dequantized to bf16 for the prefill GEMMs.
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_plans.h"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/op_signature.h"
#include "backend/cuda/quant_dequant.h"

namespace akv {

using cuda::Sig;
using enum cuda::OpKind;

namespace {

// The dtype the grouped prefill multiplies in: the experts' own float dtype (F32 stays exact:
// f32 compute, no TF32), BF16 for MXFP4 (every MXFP4 value is exact in bf16) and GGUF blocks
// (dequantized to bf16, as the dense prefill does).
DType grouped_dtype(const MoeWeights& w) {
  return w.format == ExpertFormat::Float ? w.gate_up.dtype : DType::BF16;
}

bool grouped_supported(const MoeWeights& w, const MoeParams& p) {
  if (p.n_experts > cuda::kMoeMaxExperts || p.top_k > 32) return false;
  if (w.format == ExpertFormat::Mxfp4) return true;
  if (w.format == ExpertFormat::GgufBlocks) return cuda::moe_quant_supported(w, p);
  const DType t = w.gate_up.dtype;
  return t == w.down.dtype && (t == DType::F32 || t == DType::BF16 || t == DType::F16);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

void CudaBackend::moe(TensorRef x, TensorRef router_logits, const MoeWeights& w, const MoeParams& p,
                      const MoeScratch& scratch, TensorRef out) {
  ++op_seq_;  // see norm_codes_
  check_moe_shapes(x, router_logits, w, p, scratch, out);
  AKV_CHECK(x.dtype == DType::F32 && router_logits.dtype == DType::F32 && out.dtype == DType::F32, "moe: f32");
  if (x.rows == 0) return;
  if (recording() &&
      replaying(Sig().u(kMoe).t(x).t(router_logits).w(w.gate_up).w(w.down).w(w.gate_up_scales).w(w.down_scales)
                    .w(w.gate_up_bias).w(w.down_bias).u(static_cast<std::uint64_t>(w.format))
                    .u(static_cast<std::uint64_t>(p.n_experts)).u(static_cast<std::uint64_t>(p.top_k))
                    .u(static_cast<std::uint64_t>(p.inter)).u(static_cast<std::uint64_t>(p.gating))
                    .u(p.norm_topk_prob).u(static_cast<std::uint64_t>(p.act)).f(p.swiglu_limit).f(p.swiglu_alpha)
                    .u(p.interleaved_gate_up).t(scratch.route).t(scratch.gate_up).t(scratch.act).t(scratch.down)
                    .t(out).u(static_cast<std::uint64_t>(moe_kernels_))
                    .u(static_cast<std::uint64_t>(moe_decode_kernels_))
                    .u(static_cast<std::uint64_t>(moe_mxfp4_decode_))
                    .u(static_cast<std::uint64_t>(moe_quant_staging_)).h))
    return;
  const bool grouped = !recording() && x.rows > kMoeDecodeMaxRows && grouped_supported(w, p);
  if (w.format == ExpertFormat::GgufBlocks) {  // no per-pair form: the decode kernels are the baseline
    AKV_CHECK(cuda::moe_quant_supported(w, p), "moe: GGUF expert types the CUDA kernels read (the loader "
                                               "keeps only those), at most 1,024 experts and 32 choices");
    cuda::launch_moe_route(router_logits, p, scratch.route, stream());
    if (grouped && moe_kernels_ != MoeKernels::PerPair)
      moe_grouped(x, w, p, scratch, out);
    else
      cuda::launch_moe_decode_quant(x, w, p, scratch, out, stream(), sm_count_, moe_quant_staging_);
    return;
  }
  if (w.format == ExpertFormat::Mxfp4 && !grouped && moe_kernels_ != MoeKernels::PerPair &&
      moe_mxfp4_decode_ == MoeMxfp4Decode::Int8 && cuda::moe_quant_supported(w, p)) {
    cuda::launch_moe_route(router_logits, p, scratch.route, stream());
    cuda::launch_moe_decode_quant(x, w, p, scratch, out, stream(), sm_count_, moe_quant_staging_);
    return;
  }
  const bool decode = !grouped && p.n_experts <= cuda::kMoeMaxExperts && cuda::moe_decode_supported(x, w, p);
  if (moe_kernels_ == MoeKernels::PerPair || (!grouped && !decode)) {
    cuda::launch_moe_per_pair(x, router_logits, w, p, scratch, out, stream());
    return;
  }
  cuda::launch_moe_route(router_logits, p, scratch.route, stream());
  if (grouped) {
    moe_grouped(x, w, p, scratch, out);
  } else if (moe_decode_kernels_ == MoeDecodeKernels::Pipelined) {
    cuda::launch_moe_decode_pipelined(x, w, p, scratch, out, stream());
  } else {
    cuda::launch_moe_decode(x, w, p, scratch, out, stream());
  }
}

void CudaBackend::moe_grouped(TensorRef x, const MoeWeights& w, const MoeParams& p, const MoeScratch& sc,
                              TensorRef out) {
  const cudaStream_t s = stream();
  const std::int64_t n = x.rows, hidden = x.cols, inter = p.inter, pairs = n * p.top_k;
  const DType t = grouped_dtype(w);
  const auto elem = static_cast<std::int64_t>(dtype_size(t));
  // Pairs sorted by expert; the tokens' rows in that order, in the GEMM dtype.
  const cuda::MoeGroups g =
      cuda::moe_groups_in(scratch(cuda::moe_groups_bytes(pairs, p.n_experts), 1), pairs, p.n_experts);
  cuda::launch_moe_group(sc.route, p, n, g, s);
  moe_offsets_.resize(static_cast<std::size_t>(p.n_experts + 1));
  AKV_CUDA_CHECK(cudaMemcpyAsync(moe_offsets_.data(), g.offsets, moe_offsets_.size() * sizeof(std::int32_t),
                                 cudaMemcpyDeviceToHost, s));
  auto* xg = static_cast<char*>(scratch(static_cast<std::size_t>(pairs * hidden * elem), 0));  // [pairs, hidden]
  cuda::launch_moe_gather(x, g, pairs, static_cast<int>(p.top_k), t, xg, s);
  void* dequant = w.format != ExpertFormat::Float ? scratch(static_cast<std::size_t>(2 * inter * hidden * elem), 2)
                                                  : nullptr;
  AKV_CUDA_CHECK(cudaStreamSynchronize(s));  // the GEMM shapes need each expert's row count
  // gate_up [pairs, 2 * inter], act [pairs, inter] and down [pairs, hidden] in dtype t, each in
  // the caller's f32 scratch of its shape (a row of t fits in the f32 row it replaces).
  const std::int64_t per_f32 = 4 / elem;
  auto* gate_up = static_cast<char*>(sc.gate_up.data);
  auto* act = static_cast<char*>(sc.act.data);
  auto* down = static_cast<char*>(sc.down.data);
  const std::int64_t gu_stride = sc.gate_up.stride * per_f32, act_stride = sc.act.stride * per_f32,
                     down_stride = sc.down.stride * per_f32;
  moe_expert_gemms({w.format, w.gate_up, w.gate_up_scales, 2 * inter, t, xg, hidden, gate_up, gu_stride, dequant});
  cuda::launch_moe_grouped_activation(gate_up, gu_stride, act, act_stride, t, sc.route, g, pairs, w.gate_up_bias,
                                      p, s);
  moe_expert_gemms({w.format, w.down, w.down_scales, hidden, t, act, act_stride, down, down_stride, dequant});
  cuda::launch_moe_combine(down, down_stride, t, sc.route, g, w.down_bias, p, out, s);
}

// Expert e's rows [a.rows, a.weights.cols] of a float expert matrix.
const void* CudaBackend::moe_expert_weights(const MoeExpertGemms& a, std::int64_t e) const {
  return static_cast<const char*>(a.weights.data) +
         e * a.rows * a.weights.cols * static_cast<std::int64_t>(dtype_size(a.dtype));
}

void CudaBackend::moe_expert_gemms(const MoeExpertGemms& a) {
  const bool one_launch = moe_kernels_ == MoeKernels::Grouped && !moe_grouped_gemm_unsupported_ &&
                          a.format == ExpertFormat::Float;
  if (one_launch && moe_grouped_gemm(a)) return;
  const auto elem = static_cast<std::int64_t>(dtype_size(a.dtype));
  for (std::size_t e = 0; e + 1 < moe_offsets_.size(); ++e) {
    const std::int64_t first = moe_offsets_[e], rows = moe_offsets_[e + 1] - first;
    if (rows == 0) continue;
    WeightRef w{nullptr, a.dtype, a.rows, a.weights.cols};
    if (a.format == ExpertFormat::Mxfp4) {  // into scratch first (stream order keeps it safe to reuse)
      cuda::launch_mxfp4_rows_to_bf16(a.weights, a.scales, static_cast<std::int64_t>(e) * a.rows, a.rows, a.dequant,
                                      stream());
      w.data = a.dequant;
    } else if (a.format == ExpertFormat::GgufBlocks) {  // the oracle's values rounded to bf16
      cuda::QuantWeight q = quant_weight(a.weights);
      q.data = static_cast<const char*>(q.data) + static_cast<std::int64_t>(e) * a.rows * cuda::quant_row_bytes(q.type, q.cols);
      q.rows = a.rows;
      cuda::launch_dequantize_bf16(q, a.dequant, stream());
      w.data = a.dequant;
    } else {
      w.data = moe_expert_weights(a, static_cast<std::int64_t>(e));
    }
    gemm_half(a.in + first * a.in_stride * elem, a.in_stride, rows, w, a.out + first * a.out_stride * elem, a.dtype,
              a.out_stride);
  }
}

bool CudaBackend::moe_grouped_gemm(const MoeExpertGemms& a) {
  const auto elem = static_cast<std::int64_t>(dtype_size(a.dtype));
  std::vector<const void*> ptrs[3];  // weights, in, out of each non-empty expert
  std::vector<int> rows_of;
  for (std::size_t e = 0; e + 1 < moe_offsets_.size(); ++e) {
    const std::int64_t first = moe_offsets_[e], rows = moe_offsets_[e + 1] - first;
    if (rows == 0) continue;
    ptrs[0].push_back(moe_expert_weights(a, static_cast<std::int64_t>(e)));
    ptrs[1].push_back(a.in + first * a.in_stride * elem);
    ptrs[2].push_back(a.out + first * a.out_stride * elem);
    rows_of.push_back(static_cast<int>(rows));
    if (!aligned16(ptrs[0].back()) || !aligned16(ptrs[1].back()) || !aligned16(ptrs[2].back())) return false;
  }
  if (rows_of.empty()) return true;
  const auto count = rows_of.size();
  // Aarray, Barray, Carray: device arrays of pointers, [count] each, back to back.
  std::vector<const void*> arrays(ptrs[0]);
  arrays.insert(arrays.end(), ptrs[1].begin(), ptrs[1].end());
  arrays.insert(arrays.end(), ptrs[2].begin(), ptrs[2].end());
  const auto* d = static_cast<const void* const*>(upload_small(arrays.data(), arrays.size() * sizeof(void*)));
  const std::vector<cublasOperation_t> op_t(count, CUBLAS_OP_T), op_n(count, CUBLAS_OP_N);
  const std::vector<float> one(count, 1.0f), zero(count, 0.0f);
  const std::vector<int> m(count, static_cast<int>(a.rows)), k(count, static_cast<int>(a.weights.cols)),
      ldb(count, static_cast<int>(a.in_stride)), ldc(count, static_cast<int>(a.out_stride)), group_size(count, 1);
  const cudaDataType_t type = cuda::blas_type(a.dtype);
  // C[e] [rows_e, m] (column-major m x rows_e) = W_e^T (W_e row-major [m, k]) x in_e; lda = k.
  const cublasStatus_t st = cublasGemmGroupedBatchedEx(
      blas_, op_t.data(), op_n.data(), m.data(), rows_of.data(), k.data(), one.data(), d, type, k.data(), d + count,
      type, ldb.data(), zero.data(), const_cast<void* const*>(d + 2 * count), type, ldc.data(),
      static_cast<int>(count), group_size.data(), CUBLAS_COMPUTE_32F);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) {  // this cuBLAS lacks the kernel: one GEMM per expert from now on
    moe_grouped_gemm_unsupported_ = true;
    return false;
  }
  AKV_CUBLAS_CHECK(st);
  ++moe_grouped_gemm_launches_;
  return true;
}

void CudaBackend::set_moe_kernels(MoeKernels k) { moe_kernels_ = k; }

}  // namespace akv
