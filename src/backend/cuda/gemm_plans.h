// Half-precision GEMMs through cuBLASLt with the algorithm chosen once per problem class.
// cuBLAS chooses an algorithm for every new problem shape (a heuristic query, 0.1-0.3 ms of host
// time on an H100), and the first launch of an algorithm's kernel costs another 2-4 ms of host
// time: through `agentkv serve`, the first layer of a next turn whose token count was new took
// 5-10 ms longer than the other 31 layers (docs/perf/serving.md). Here the choice is kept per
// (weight shape, dtypes, alignments, class of token counts), the classes being four per octave
// above 64 rows, so a prompt of a new length reuses its class's algorithm; `warm` runs every
// class of a weight shape once (CudaBackend::warm_up, at start-up) so that served steps meet
// neither cost. Engine thread only (CudaBackend's stream).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>

#include "tensor/dtype.h"

namespace akv::cuda {

// cuBLAS's type for a weight or activation dtype (bf16, f16; f32 for the rest).
inline cudaDataType_t blas_type(DType t) {
  return t == DType::BF16 ? CUDA_R_16BF : t == DType::F16 ? CUDA_R_16F : CUDA_R_32F;
}

class GemmPlans {
 public:
  // `workspace` (device, `workspace_bytes`) is shared with the caller's other cuBLAS work on the
  // same stream.
  GemmPlans(void* workspace, std::size_t workspace_bytes);
  ~GemmPlans();
  GemmPlans(const GemmPlans&) = delete;
  GemmPlans& operator=(const GemmPlans&) = delete;

  // out[n, m] = a[n, k] . w[m, k]^T (row-major; row strides lda, ldo in elements; w dense), a and
  // w of type `in` (bf16 or f16), out of `out_type` (f32 or `in`), f32 accumulation. Returns false
  // (nothing launched) where cuBLASLt has no algorithm for the class: the caller falls back.
  bool run(const void* w, const void* a, std::int64_t lda, void* out, std::int64_t ldo,
           std::int64_t m, std::int64_t n, std::int64_t k, cudaDataType_t in,
           cudaDataType_t out_type, cudaStream_t stream);

  // The token count whose algorithm serves `n` rows: n itself up to 64, above that n rounded up
  // to a quarter of its octave (449..512 -> 512, 513..640 -> 640).
  static std::int64_t class_rows(std::int64_t n);
  // Runs w [m, k] once for every class of rows from `first_rows`'s to `max_rows`'s, into f32 and
  // into the weight's type, on `a` (>= class_rows(max_rows) * k elements of type `in`) and `out`
  // (>= class_rows(max_rows) * m floats): their choices are made and their kernels loaded.
  // Returns the GEMMs run.
  std::int64_t warm(const void* w, std::int64_t m, std::int64_t k, cudaDataType_t in,
                    std::int64_t first_rows, std::int64_t max_rows, const void* a, void* out,
                    cudaStream_t stream);
  std::int64_t heuristic_queries() const { return queries_; }

 private:
  struct Key {
    std::int64_t m = 0, k = 0, rows = 0;  // row strides only count through the alignments
    int in = 0, out = 0;
    std::uint32_t align_w = 0, align_a = 0, align_out = 0;
    auto operator<=>(const Key&) const = default;
  };
  struct Plan {
    cublasLtMatmulAlgo_t algo{};
    bool found = false;
  };
  const Plan& plan_for(const Key& key);

  cublasLtHandle_t lt_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;  // w^T a, f32 compute and scale: one for every call
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  std::map<Key, Plan> plans_;
  std::int64_t queries_ = 0;
};

}  // namespace akv::cuda
