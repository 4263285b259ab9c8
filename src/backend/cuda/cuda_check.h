// AKV_CUDA_CHECK / AKV_CUBLAS_CHECK: CUDA runtime and cuBLAS calls checked like AKV_CHECK
// (always on; a failure prints file:line and the error name, then aborts).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "base/check.h"

#define AKV_CUDA_CHECK(expr)                                                                     \
  do {                                                                                           \
    const cudaError_t akv_err_ = (expr);                                                         \
    if (akv_err_ != cudaSuccess) [[unlikely]]                                                    \
      ::akv::detail::check_failed(__FILE__, __LINE__, #expr,                                     \
                                  std::string(cudaGetErrorName(akv_err_)) + ": " +               \
                                      cudaGetErrorString(akv_err_));                             \
  } while (0)

#define AKV_CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                           \
    const cublasStatus_t akv_st_ = (expr);                                                       \
    if (akv_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                           \
      ::akv::detail::check_failed(__FILE__, __LINE__, #expr, cublasGetStatusString(akv_st_));    \
  } while (0)

// Checks the launch that precedes it (bad configuration, missing kernel image).
#define AKV_CUDA_CHECK_LAUNCH() AKV_CUDA_CHECK(cudaGetLastError())
