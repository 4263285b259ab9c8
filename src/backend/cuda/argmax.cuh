// The argmax_row reduction (backend.h) as device code, shared by argmax.cu (greedy ids) and
// sample.cu (sample_rows: its greedy rows and the max a draw needs).
#pragma once

#include <cstdint>

namespace akv::cuda {

// A candidate: the lowest id of the largest non-NaN value seen so far (id -1: none yet).
struct Best {
  float v;
  std::int32_t id;
};

// The better of two candidates under argmax_row's rule: larger value, then lower id.
__device__ __forceinline__ Best better(Best a, Best b) {
  if (b.id < 0) return a;
  if (a.id < 0) return b;
  return (b.v > a.v || (b.v == a.v && b.id < a.id)) ? b : a;
}

__device__ __forceinline__ Best warp_best(Best x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Best y{__shfl_xor_sync(0xffffffffu, x.v, o), __shfl_xor_sync(0xffffffffu, x.id, o)};
    x = better(x, y);
  }
  return x;
}

// This thread's candidate after scanning v from id `c` on: ids rise, so the first max stays.
__device__ __forceinline__ void consider(Best& b, float v, std::int64_t c) {
  if (!isnan(v) && (b.id < 0 || v > b.v)) b = {v, static_cast<std::int32_t>(c)};
}

}  // namespace akv::cuda
