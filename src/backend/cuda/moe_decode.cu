// The MoE experts of a few tokens (decode), after the device routing: bandwidth-bound reads of
// only the chosen experts' rows in 16-byte chunks, several rows in flight per lane. Launch 1:
// per (token, choice) pair, the gate and up rows of each output j together (x of the token in
// shared memory), biases and activation applied, act[pair, j] written. Launch 2: per token, each
// output row of the down projection over all k chosen experts at once (the token's activations,
// pre-multiplied by their routing weights, in shared memory), down biases added: `out` directly.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/moe_decode_chunk.cuh"
#include "backend/cuda/moe_device.cuh"
#include "backend/cuda/moe_kernels.h"

namespace akv::cuda {
namespace {

constexpr int kWarps = 8;                          // per block, both launches
constexpr int kOutputsPerWarp = 2;                 // gate/up launch: act outputs j per warp
constexpr int kChunksInFlight = 4;                 // down launch: 16-byte loads in flight per lane
constexpr std::size_t kMaxSmemBytes = 96u << 10;   // x of a token; one token's k activations

// grid (ceil(inter / (kWarps * kOutputsPerWarp)), n * top_k); dynamic shared memory: hidden floats.
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    moe_decode_gate_up_kernel(const float* x, std::int64_t x_stride, const void* w, const std::uint8_t* scales,
                              const void* bias, DType bias_dtype, const float* route, std::int64_t route_stride,
                              float* act, std::int64_t act_stride, DeviceMoe m) {
  extern __shared__ float4 smem[];
  float* xs = reinterpret_cast<float*>(smem);  // [hidden]
  __shared__ float lut[16];
  fill_lut(lut);
  pdl_trigger();
  pdl_wait();
  const int a = blockIdx.y, token = a / m.top_k, choice = a % m.top_k;
  const int expert = static_cast<int>(route[token * route_stride + choice]);
  const float* xr = x + token * x_stride;
  for (int c = threadIdx.x; c < m.hidden; c += blockDim.x) xs[c] = xr[c];
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int j0 = (blockIdx.x * kWarps + warp) * kOutputsPerWarp;
  if (j0 >= m.inter) return;
  constexpr int kRows = 2 * kOutputsPerWarp;  // gate and up of each output
  std::int64_t rows[kRows];
  bool valid[kRows];
#pragma unroll
  for (int o = 0; o < kOutputsPerWarp; ++o) {
    const int j = j0 + o;
    const std::int64_t base = std::int64_t{expert} * 2 * m.inter;
    valid[2 * o] = valid[2 * o + 1] = j < m.inter;
    rows[2 * o] = base + (m.interleaved ? 2 * j : j);
    rows[2 * o + 1] = base + (m.interleaved ? 2 * j + 1 : m.inter + j);
  }
  float acc[kRows] = {};
  const int n_chunks = m.hidden / kPerChunk<T>;
  for (int q = lane; q < n_chunks; q += 32) {
    uint4 raw[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) raw[r] = valid[r] ? load_chunk<T>(w, rows[r], m.hidden, q) : uint4{};
    const float* xq = xs + q * kPerChunk<T>;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      acc[r] += dot_chunk<T>(raw[r], xq, lut) * chunk_scale<T>(scales, rows[r], m.hidden, q);
  }
  store_gate_up<kOutputsPerWarp>(acc, rows, valid, bias, bias_dtype, m, act + a * act_stride + j0);
}

// grid (ceil(hidden / kWarps), n); dynamic shared memory: top_k * inter floats.
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    moe_decode_down_kernel(const float* act, std::int64_t act_stride, const void* w, const std::uint8_t* scales,
                           const void* bias, DType bias_dtype, const float* route, std::int64_t route_stride,
                           float* out, std::int64_t out_stride, DeviceMoe m) {
  extern __shared__ float4 smem[];
  float* acts = reinterpret_cast<float*>(smem);  // [top_k][inter], each times its routing weight
  __shared__ float lut[16];
  __shared__ int experts[32];
  __shared__ float weights[32];
  fill_lut(lut);
  pdl_trigger();
  pdl_wait();
  const int t = blockIdx.y;
  if (threadIdx.x < m.top_k) {
    experts[threadIdx.x] = static_cast<int>(route[t * route_stride + threadIdx.x]);
    weights[threadIdx.x] = route[t * route_stride + m.top_k + threadIdx.x];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < m.top_k * m.inter; i += blockDim.x) {
    const int k = i / m.inter, c = i % m.inter;
    acts[i] = weights[k] * act[(std::int64_t{t} * m.top_k + k) * act_stride + c];
  }
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const int r = blockIdx.x * kWarps + threadIdx.x / 32;
  if (r >= m.hidden) return;
  // The token's k rows r of down, one after another: chunk q is chunk q % per_row of expert q / per_row.
  const int per_row = m.inter / kPerChunk<T>, n_chunks = m.top_k * per_row;
  float acc = 0.0f;
  for (int q0 = lane; q0 < n_chunks; q0 += 32 * kChunksInFlight) {
    uint4 raw[kChunksInFlight];
    std::int64_t row[kChunksInFlight];
    int col[kChunksInFlight];
#pragma unroll
    for (int i = 0; i < kChunksInFlight; ++i) {
      const int q = q0 + 32 * i;
      const int k = q / per_row;
      col[i] = q - k * per_row;
      row[i] = q < n_chunks ? std::int64_t{experts[k]} * m.hidden + r : -1;
      raw[i] = q < n_chunks ? load_chunk<T>(w, row[i], m.inter, col[i]) : uint4{};
    }
#pragma unroll
    for (int i = 0; i < kChunksInFlight; ++i) {
      const int q = q0 + 32 * i;
      if (q >= n_chunks) break;
      const float* aq = acts + (q / per_row) * m.inter + col[i] * kPerChunk<T>;
      acc += dot_chunk<T>(raw[i], aq, lut) * chunk_scale<T>(scales, row[i], m.inter, col[i]);
    }
  }
  acc = warp_sum(acc);
  if (lane != 0) return;
  float b = 0.0f;
  if (bias != nullptr)
    for (int k = 0; k < m.top_k; ++k) b += weights[k] * moe_bias_at(bias, bias_dtype, std::int64_t{experts[k]} * m.hidden + r);
  out[std::int64_t{t} * out_stride + r] = acc + b;
}

template <typename T>
void launch_decode(TensorRef x, const MoeWeights& w, const DeviceMoe& m, const MoeScratch& s, TensorRef out, int n,
                   Stream st) {
  const float* route = static_cast<const float*>(s.route.data);
  const std::size_t x_smem = static_cast<std::size_t>(m.hidden) * sizeof(float);
  const std::size_t act_smem = static_cast<std::size_t>(m.top_k) * m.inter * sizeof(float);
  static bool attributes_set = false;  // the engine thread is the only caller
  if (!attributes_set) {  // more than the default 48 KiB of dynamic shared memory
    AKV_CUDA_CHECK(cudaFuncSetAttribute(moe_decode_gate_up_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(kMaxSmemBytes)));
    AKV_CUDA_CHECK(cudaFuncSetAttribute(moe_decode_down_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(kMaxSmemBytes)));
    attributes_set = true;
  }
  launch(moe_decode_gate_up_kernel<T>, dim3(blocks_for(m.inter, kWarps * kOutputsPerWarp), n * m.top_k),
         kWarps * 32, x_smem, st, static_cast<const float*>(x.data), x.stride, w.gate_up.data,
         static_cast<const std::uint8_t*>(w.gate_up_scales.data), w.gate_up_bias.data, w.gate_up_bias.dtype, route,
         s.route.stride, static_cast<float*>(s.act.data), s.act.stride, m);
  launch(moe_decode_down_kernel<T>, dim3(blocks_for(m.hidden, kWarps), n), kWarps * 32, act_smem, st,
         static_cast<const float*>(s.act.data), s.act.stride, w.down.data,
         static_cast<const std::uint8_t*>(w.down_scales.data), w.down_bias.data, w.down_bias.dtype, route,
         s.route.stride, static_cast<float*>(out.data), out.stride, m);
}

int per_chunk(const MoeWeights& w) {
  if (w.format == ExpertFormat::Mxfp4) return 32;
  return 16 / static_cast<int>(dtype_size(w.gate_up.dtype));
}

}  // namespace

bool moe_decode_supported(TensorRef x, const MoeWeights& w, const MoeParams& p) {
  if (w.format == ExpertFormat::Float &&
      (w.gate_up.dtype != w.down.dtype ||
       (w.gate_up.dtype != DType::F32 && w.gate_up.dtype != DType::BF16 && w.gate_up.dtype != DType::F16)))
    return false;
  const std::int64_t per = per_chunk(w);
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  return p.top_k <= 32 && x.cols % per == 0 && p.inter % per == 0 && aligned(w.gate_up.data) &&
         aligned(w.down.data) && static_cast<std::size_t>(x.cols) * sizeof(float) <= kMaxSmemBytes &&
         static_cast<std::size_t>(p.top_k * p.inter) * sizeof(float) <= kMaxSmemBytes;
}

void launch_moe_decode(TensorRef x, const MoeWeights& w, const MoeParams& p, const MoeScratch& scratch,
                       TensorRef out, Stream s) {
  AKV_CHECK(moe_decode_supported(x, w, p), "moe decode: unsupported shape");
  const DeviceMoe m = device_moe(p, x.cols);
  const int n = static_cast<int>(x.rows);
  if (w.format == ExpertFormat::Mxfp4) {
    launch_decode<Mxfp4>(x, w, m, scratch, out, n, s);
  } else {
    dispatch_float(w.gate_up.dtype, [&](auto tag) { launch_decode<decltype(tag)>(x, w, m, scratch, out, n, s); });
  }
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
