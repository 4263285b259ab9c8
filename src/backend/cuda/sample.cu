// Greedy picks and plain temperature draws on the device (Backend::sample_rows), so a sampled
// step copies back one int32 per sequence instead of its vocab floats. The draw follows
// draw_row (backend.h); only the order of its double sums differs (see the kernel).
#include <cstdint>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"

namespace akv::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
static_assert(kWarps == 32, "the scan of warp sums runs in one warp");

// argmax_row's reduction (backend.h). A candidate: the lowest id of the largest non-NaN value seen so far (id -1: none yet).
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

// Inclusive prefix sum over the lanes of a warp.
__device__ __forceinline__ double warp_inclusive_sum(double v, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double y = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += y;
  }
  return v;
}

// draw_row's x for a logit: the same float multiply (no contraction) as the host's.
__device__ __forceinline__ float scaled(float logit, float inv_t) {
  return __fmul_rn(logit, inv_t);
}

// One block per row. Greedy rows (temperature <= 0) take argmax_row. A draw: pass 1 finds the
// largest x = logit * (1 / temperature); pass 2 gives each thread a contiguous chunk of ids and
// the sum of exp(double(x) - max) over it; a block-wide scan of those sums (in double) places
// target = u * total in one chunk, whose thread walks it in id order as the host does. The
// sums are associated differently from the host's id-order loop, so the id can differ only when
// the target lies within rounding (~1e-12 relative) of a boundary between two ids.
__global__ void sample_rows_kernel(const float* x, std::int64_t stride, std::int64_t cols,
                                   const float* temperature, const double* uniform,
                                   std::int32_t* out) {
  pdl_trigger();
  pdl_wait();
  const float* row = x + blockIdx.x * stride;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const float t = temperature[blockIdx.x];
  const bool greedy = t <= 0.0f;
  const float inv_t = greedy ? 1.0f : __fdiv_rn(1.0f, t);

  // Pass 1: argmax_row's candidate over x (the raw logits for greedy rows), and any NaN.
  Best b{0.0f, -1};
  bool nan = false;
  for (std::int64_t c = tid; c < cols; c += kThreads) {
    const float v = greedy ? row[c] : scaled(row[c], inv_t);
    nan = nan || isnan(v);
    consider(b, v, c);
  }
  b = warp_best(b);
  __shared__ Best warps[kWarps];
  __shared__ Best best;
  if (lane == 0) warps[warp] = b;
  __syncthreads();
  if (warp == 0) {
    b = warp_best(warps[lane]);
    if (lane == 0) best = b;
  }
  const bool any_nan = __syncthreads_or(nan);  // also publishes `best`
  b = best;
  if (greedy) {
    if (tid == 0) out[blockIdx.x] = (b.id < 0 || isnan(row[0])) ? 0 : b.id;
    return;
  }
  // A NaN or +inf x, or a row all -inf, makes draw_row's total NaN: the last id.
  if (any_nan || b.id < 0 || isinf(b.v)) {
    if (tid == 0) out[blockIdx.x] = static_cast<std::int32_t>(cols - 1);
    return;
  }
  const double max = b.v;

  // Pass 2: this thread's ids [begin, end) and their weight.
  const std::int64_t chunk = (cols + kThreads - 1) / kThreads;
  const std::int64_t begin = tid * chunk < cols ? tid * chunk : cols;
  const std::int64_t end = begin + chunk < cols ? begin + chunk : cols;
  double sum = 0.0;
  for (std::int64_t c = begin; c < end; ++c)
    sum += exp(static_cast<double>(scaled(row[c], inv_t)) - max);

  // The weight of the ids before this chunk (exclusive scan) and the row's total.
  const double inclusive = warp_inclusive_sum(sum, lane);
  const double lane_before = __shfl_up_sync(0xffffffffu, inclusive, 1);
  __shared__ double warp_sums[kWarps];
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) warp_sums[lane] = warp_inclusive_sum(warp_sums[lane], lane);
  __syncthreads();
  const double before = (warp > 0 ? warp_sums[warp - 1] : 0.0) + (lane > 0 ? lane_before : 0.0);
  const double total = warp_sums[kWarps - 1];
  const double target = uniform[blockIdx.x] * total;

  // The chunk that holds the target: the last weighted chunk starting at or below it. (The
  // first weighted chunk starts at exactly 0, so a target in [0, total) always has one.)
  __shared__ int owner, last_weighted;
  if (tid == 0) owner = last_weighted = -1;
  __syncthreads();
  if (sum > 0.0) {
    atomicMax(&last_weighted, tid);
    if (before <= target) atomicMax(&owner, tid);
  }
  __syncthreads();
  if (owner < 0) {  // target < 0 or NaN (u outside [0, 1)): what draw_row gives
    if (tid == 0) out[blockIdx.x] = target < 0.0 ? 0 : static_cast<std::int32_t>(cols - 1);
    return;
  }
  if (tid != owner) return;
  double left = target - before;
  std::int64_t last = begin;  // the chunk's last id of nonzero weight
  for (std::int64_t c = begin; c < end; ++c) {
    const double w = exp(static_cast<double>(scaled(row[c], inv_t)) - max);
    left -= w;
    if (left < 0.0) {
      out[blockIdx.x] = static_cast<std::int32_t>(c);
      return;
    }
    if (w > 0.0) last = c;
  }
  // Rounding left a sliver: past the last weighted chunk draw_row also ends on the last id;
  // otherwise the target sits on the boundary with the next weighted chunk.
  out[blockIdx.x] = static_cast<std::int32_t>(tid == last_weighted ? cols - 1 : last);
}

}  // namespace

void launch_sample_rows(TensorRef x, const float* temperature, const double* uniform,
                        std::int32_t* out, Stream s) {
  if (x.rows == 0) return;
  AKV_CHECK(x.dtype == DType::F32, "sample_rows: F32 logits");
  AKV_CHECK(x.rows < (1ll << 31) && x.cols > 0 && x.cols < (1ll << 31),
            "sample_rows: tensor shape");
  launch(sample_rows_kernel, dim3(static_cast<unsigned>(x.rows)), kThreads, 0, s,
         static_cast<const float*>(x.data), x.stride, x.cols, temperature, uniform, out);
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
