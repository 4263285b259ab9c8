// The integer dot kernels of quant_dot.h and quant_repack.h with AVX-512 VNNI (dpbusd, dpwssd
// on 256-bit vectors: avx512vl + avx512vnni). Built with the default flags; find_quant_dot and
// find_repacked_dot only hand them out when the CPU has the instructions.
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/quant_dot.h"
#include "backend/cpu/quant_repack.h"
#include "tensor/quant_blocks.h"

#define AKV_QDOT_TARGET \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))
#define AKV_QDOT_VNNI 1

namespace akv {
namespace qdot_vnni {
#include "backend/cpu/quant_dot_simd.h"
#include "backend/cpu/quant_repack_simd.h"
}  // namespace qdot_vnni

QuantDotFn find_quant_dot_vnni(DType w) {
  return qdot_vnni::find_kernel(w);
}

RepackedDotFn find_repacked_dot_vnni(DType w) {
  return qdot_vnni::find_repacked_kernel(w);
}

}  // namespace akv
