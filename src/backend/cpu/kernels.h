// SIMD kernels of the CPU fast path, one table per instruction set (scalar, AVX2+FMA, AVX-512),
// picked at run time so the default build runs on any x86-64. Internal to backend/cpu: the
// FastBackend threads and tiles the work; a kernel is single-threaded and allocation-free.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace akv {

enum class Isa { Scalar, Avx2, Avx512 };

bool isa_supported(Isa isa);  // the running CPU has it
Isa best_isa();               // the widest supported one
const char* isa_name(Isa isa);

// One matmul slice: out[r, m] = sum_k x[r, k] * w[m, k] (+ bias[m]), r < n_rows.
struct GemvArgs {
  const float* x = nullptr;     // [n_rows, k], rows x_stride floats apart
  std::int64_t x_stride = 0;
  std::int64_t n_rows = 0;
  const void* w = nullptr;      // [m, k] row-major, F32, BF16 or F16
  DType w_dtype = DType::F32;
  std::int64_t k = 0;
  const void* bias = nullptr;   // [m] of bias_dtype, or null
  DType bias_dtype = DType::F32;
  float* out = nullptr;         // [n_rows, m], rows out_stride floats apart
  std::int64_t out_stride = 0;
};

enum class GluKind { Silu, GeluTanh };

struct Kernels {
  // Rows [m_begin, m_end) of a matmul; each weight row is read from memory once for all
  // n_rows inputs (n_rows small: decode). Accumulates in f32.
  void (*gemv)(const GemvArgs& a, std::int64_t m_begin, std::int64_t m_end);
  // dst[i] = float(src[i]) for an F32, BF16 or F16 source (exact).
  void (*to_f32)(const void* src, DType dtype, std::int64_t n, float* dst);
  // x[i] = exp(x[i] - shift); returns the sum of the new x. exp(-inf) = 0.
  float (*exp_sum)(float* x, std::int64_t n, float shift);
  // y[i] = act(g[i]) * u[i]; gelu_tanh(g) is computed as g * sigmoid(2 k (g + 0.044715 g^3)).
  void (*glu)(const float* g, const float* u, float* y, std::int64_t n, GluKind kind);
  // sum of x[i]^2
  float (*sum_squares)(const float* x, std::int64_t n);
  // argmax_row (backend.h) of x[0, n), n >= 1: the first id of the largest value, NaN never
  // winning, 0 when x[0] is NaN.
  std::int32_t (*argmax)(const float* x, std::int64_t n);
};

const Kernels& kernels_for(Isa isa);

// Per-ISA tables (kernels_scalar.cpp, kernels_avx2.cpp, kernels_avx512.cpp).
const Kernels& scalar_kernels();
const Kernels& avx2_kernels();
const Kernels& avx512_kernels();

}  // namespace akv
