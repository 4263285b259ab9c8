#include "backend/cuda/gemm_plans.h"

#include <algorithm>
#include <bit>

#include "backend/cuda/cuda_check.h"

namespace akv::cuda {

namespace {

// The largest power of two (at most 256) dividing the address and the row stride in bytes: what
// cuBLASLt's alignment preferences take.
std::uint32_t alignment(const void* p, std::int64_t ld_bytes) {
  const auto bits =
      reinterpret_cast<std::uintptr_t>(p) | static_cast<std::uintptr_t>(ld_bytes) | 256u;
  return static_cast<std::uint32_t>(bits & (~bits + 1));
}

std::int64_t element_bytes(cudaDataType_t t) {
  return t == CUDA_R_32F ? 4 : 2;
}

// Column-major layout of `rows` x `cols` with leading dimension `ld` (our row-major [cols, rows]),
// initialised in place: every GEMM call describes its operands, and Init, unlike Create, does not
// allocate on the host.
struct Layout {
  Layout(cudaDataType_t t, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
    AKV_CUBLAS_CHECK(cublasLtMatrixLayoutInit(l, t, static_cast<std::uint64_t>(rows),
                                              static_cast<std::uint64_t>(cols), ld));
  }
  Layout(const Layout&) = delete;  // `l` points into this object
  Layout& operator=(const Layout&) = delete;
  cublasLtMatrixLayoutOpaque_t storage{};
  cublasLtMatrixLayout_t l = &storage;
};

}  // namespace

GemmPlans::GemmPlans(void* workspace, std::size_t workspace_bytes)
    : workspace_(workspace), workspace_bytes_(workspace_bytes) {
  AKV_CUBLAS_CHECK(cublasLtCreate(&lt_));
  AKV_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
  AKV_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
  AKV_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n)));
}

GemmPlans::~GemmPlans() {
  cublasLtMatmulDescDestroy(desc_);
  cublasLtDestroy(lt_);
}

std::int64_t GemmPlans::class_rows(std::int64_t n) {
  if (n <= 64) return n;
  const int octave =
      std::bit_width(static_cast<std::uint64_t>(n - 1));  // 2^(octave-1) < n <= 2^octave
  const std::int64_t step = std::int64_t{1} << (octave - 3);
  return (n + step - 1) / step * step;
}

const GemmPlans::Plan& GemmPlans::plan_for(const Key& key) {
  if (const auto it = plans_.find(key); it != plans_.end()) return it->second;
  // The query runs for the class's row count; every count of the class then uses its answer.
  const auto in = static_cast<cudaDataType_t>(key.in), out = static_cast<cudaDataType_t>(key.out);
  const Layout w(in, key.k, key.m, key.k), a(in, key.k, key.rows, key.k),
      o(out, key.m, key.rows, key.m);
  cublasLtMatmulPreference_t pref = nullptr;
  AKV_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const std::uint64_t ws = workspace_bytes_;
  AKV_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const std::uint32_t aligns[4] = {key.align_w, key.align_a, key.align_out, key.align_out};
  const cublasLtMatmulPreferenceAttributes_t which[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    AKV_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref, which[i], &aligns[i], sizeof(aligns[i])));
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt_, desc_, w.l, a.l, o.l, o.l, pref, 1, &result, &count);
  cublasLtMatmulPreferenceDestroy(pref);
  ++queries_;
  Plan plan;
  plan.found = st == CUBLAS_STATUS_SUCCESS && count > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (plan.found) plan.algo = result.algo;
  return plans_.emplace(key, plan).first->second;
}

bool GemmPlans::run(const void* w, const void* a, std::int64_t lda, void* out, std::int64_t ldo,
                    std::int64_t m, std::int64_t n, std::int64_t k, cudaDataType_t in,
                    cudaDataType_t out_type, cudaStream_t stream) {
  const std::int64_t in_bytes = element_bytes(in), out_bytes = element_bytes(out_type);
  const Key key{.m = m,
                .k = k,
                .rows = class_rows(n),
                .in = static_cast<int>(in),
                .out = static_cast<int>(out_type),
                .align_w = alignment(w, k * in_bytes),
                .align_a = alignment(a, lda * in_bytes),
                .align_out = alignment(out, ldo * out_bytes)};
  const Plan& plan = plan_for(key);
  if (!plan.found) return false;
  const Layout wl(in, k, m, k), al(in, k, n, lda), ol(out_type, m, n, ldo);
  const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t st =
      cublasLtMatmul(lt_, desc_, &one, w, wl.l, a, al.l, &zero, out, ol.l, out, ol.l, &plan.algo,
                     workspace_, workspace_bytes_, stream);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE)
    return false;  // not for this n
  AKV_CUBLAS_CHECK(st);
  return true;
}

std::int64_t GemmPlans::warm(const void* w, std::int64_t m, std::int64_t k, cudaDataType_t in,
                             std::int64_t first_rows, std::int64_t max_rows, const void* a,
                             void* out, cudaStream_t stream) {
  std::int64_t runs = 0;
  for (std::int64_t n = class_rows(std::max<std::int64_t>(first_rows, 1));; n = class_rows(n + 1)) {
    for (const cudaDataType_t out_type : {CUDA_R_32F, in})
      runs += run(w, a, k, out, m, m, n, k, in, out_type, stream) ? 1 : 0;
    if (n >= max_rows) break;  // the class that holds max_rows ran
  }
  return runs;
}

}  // namespace akv::cuda
