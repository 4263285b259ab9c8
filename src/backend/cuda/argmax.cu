// Greedy sampling on the device: the argmax id of each logits row (Backend::argmax_rows), so a
// greedy step copies back one int32 per sequence instead of its vocab floats.
#include <cstdint>

#include "backend/cuda/argmax.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"

namespace akv::cuda {
namespace {

constexpr int kThreads = 1024;

// One block per row. argmax_row scans from id 0 and moves only to a strictly larger value: the
// result is the lowest id of the largest non-NaN value, or 0 when row[0] is NaN (nothing beats
// it) or every value is NaN.
__global__ void argmax_rows_kernel(const float* x, std::int64_t stride, std::int64_t cols,
                                   std::int32_t* out) {
  pdl_trigger();
  pdl_wait();
  const float* row = x + blockIdx.x * stride;
  Best b{0.0f, -1};
  for (std::int64_t c = threadIdx.x; c < cols; c += kThreads) consider(b, row[c], c);
  b = warp_best(b);
  __shared__ Best warps[kThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warps[warp] = b;
  __syncthreads();
  if (warp != 0) return;
  b = lane < kThreads / 32 ? warps[lane] : Best{0.0f, -1};
  b = warp_best(b);
  if (lane == 0) out[blockIdx.x] = (b.id < 0 || isnan(row[0])) ? 0 : b.id;
}

}  // namespace

void launch_argmax_rows(TensorRef x, std::int32_t* out, Stream s) {
  if (x.rows == 0) return;
  AKV_CHECK(x.rows < (1ll << 31) && x.cols < (1ll << 31), "argmax_rows: tensor too large");
  launch(argmax_rows_kernel, dim3(static_cast<unsigned>(x.rows)), kThreads, 0, s,
         static_cast<const float*>(x.data), x.stride, x.cols, out);
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
