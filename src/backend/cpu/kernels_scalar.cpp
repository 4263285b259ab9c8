// Portable kernels of the fast path (any x86-64 or other CPU) and the run-time ISA dispatch.
// f32 accumulation like the SIMD tables, so all fast paths round alike.
#include <cmath>

#include "backend/backend.h"
#include "backend/cpu/host_buffer.h"
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace akv {
namespace {

void gemv_scalar(const GemvArgs& a, std::int64_t m_begin, std::int64_t m_end) {
  const std::size_t row_bytes = static_cast<std::size_t>(a.k) * dtype_size(a.w_dtype);
  for (std::int64_t m = m_begin; m < m_end; ++m) {
    const void* wr = static_cast<const char*>(a.w) + m * row_bytes;
    const float b = a.bias != nullptr ? load_f32(a.bias, a.bias_dtype, m) : 0.0f;
    for (std::int64_t r = 0; r < a.n_rows; ++r) {
      const float* xr = a.x + r * a.x_stride;
      float acc = 0.0f;
      for (std::int64_t k = 0; k < a.k; ++k) acc += xr[k] * load_f32(wr, a.w_dtype, k);
      a.out[r * a.out_stride + m] = acc + b;
    }
  }
}

void to_f32_scalar(const void* src, DType dtype, std::int64_t n, float* dst) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = load_f32(src, dtype, i);
}

float exp_sum_scalar(float* x, std::int64_t n, float shift) {
  float sum = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - shift));
  return sum;
}

void glu_scalar(const float* g, const float* u, float* y, std::int64_t n, GluKind kind) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  for (std::int64_t i = 0; i < n; ++i) {
    const float z = kind == GluKind::Silu ? g[i] : 2.0f * k * (g[i] + 0.044715f * g[i] * g[i] * g[i]);
    y[i] = g[i] / (1.0f + std::exp(-z)) * u[i];
  }
}

std::int32_t argmax_scalar(const float* x, std::int64_t n) {
  return argmax_row({x, static_cast<std::size_t>(n)});
}

float sum_squares_scalar(const float* x, std::int64_t n) {
  float acc = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) acc += x[i] * x[i];
  return acc;
}

}  // namespace

const Kernels& scalar_kernels() {
  static const Kernels k{gemv_scalar, to_f32_scalar,      exp_sum_scalar,
                         glu_scalar,  sum_squares_scalar, argmax_scalar};
  return k;
}

#if defined(__x86_64__)
// CPUID leaf 1, ECX bit 29. Asked directly: clang does not accept "f16c" in
// __builtin_cpu_supports.
static bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & bit_F16C) != 0;
}
#endif

bool isa_supported(Isa isa) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    case Isa::Avx512:
      return isa_supported(Isa::Avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  }
  return false;
#else
  return isa == Isa::Scalar;
#endif
}

Isa best_isa() {
  if (isa_supported(Isa::Avx512)) return Isa::Avx512;
  if (isa_supported(Isa::Avx2)) return Isa::Avx2;
  return Isa::Scalar;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

const Kernels& kernels_for(Isa isa) {
  AKV_CHECK(isa_supported(isa), "instruction set not supported by this CPU");
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return avx512_kernels();
  if (isa == Isa::Avx2) return avx2_kernels();
#endif
  return scalar_kernels();
}

}  // namespace akv
