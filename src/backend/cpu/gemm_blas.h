// Prefill matmul through OpenBLAS: out[n, m] = x[n, k] @ w[m, k]^T (+ bias), n large.
// The weight rows are split across the pool's threads, each calling single-threaded sgemm on
// its slice; BF16/F16 weights are widened panel by panel into the thread's scratch first.
#pragma once

#include "backend/cpu/kernels.h"
#include "backend/cpu/parallel.h"

namespace akv {

// `a` describes the whole product (n = a.n_rows, m = n_weight_rows). OpenBLAS must be in
// single-threaded mode (FastBackend sets it).
void matmul_blas(ThreadPool& pool, const Kernels& kernels, ThreadScratch& scratch,
                 const GemvArgs& a, std::int64_t n_weight_rows);

}  // namespace akv
