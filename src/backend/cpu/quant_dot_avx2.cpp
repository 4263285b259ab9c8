// The integer dot kernels of quant_dot.h and quant_repack.h for AVX2 (+ FMA, F16C): maddubs +
// madd. Built with the default flags; find_quant_dot and find_repacked_dot only hand them out
// when the CPU has the instructions.
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/quant_dot.h"
#include "backend/cpu/quant_repack.h"
#include "tensor/quant_blocks.h"

#define AKV_QDOT_TARGET __attribute__((target("avx2,fma,f16c")))
#define AKV_QDOT_VNNI 0

namespace akv {
namespace qdot_avx2 {
#include "backend/cpu/quant_dot_simd.h"
#include "backend/cpu/quant_repack_simd.h"
}  // namespace qdot_avx2

QuantDotFn find_quant_dot_avx2(DType w) {
  return qdot_avx2::find_kernel(w);
}

RepackedDotFn find_repacked_dot_avx2(DType w) {
  return qdot_avx2::find_repacked_kernel(w);
}

float quantize_block_avx2(const float* x, int n, std::int8_t* qs) {
  return qdot_avx2::quantize_block(x, n, qs);
}

}  // namespace akv
