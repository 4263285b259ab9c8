// The MoE experts of a few tokens (decode), after the device routing: bandwidth-bound reads of
// only the chosen experts' rows in 16-byte chunks, several rows in flight per lane. Launch 1:
// per (token, choice) pair, the gate and up rows of each output j together (x of the token in
// shared memory), biases and activation applied, act[pair, j] written. Launch 2: per token, each
// output row of the down projection over all k chosen experts at once (the token's activations,
// pre-multiplied by their routing weights, in shared memory), down biases added: `out` directly.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/moe_device.cuh"
#include "backend/cuda/moe_kernels.h"

namespace akv::cuda {
namespace {

struct Mxfp4 {};  // tag: rows of MXFP4 blocks with E8M0 scales

constexpr int kWarps = 8;                          // per block, both launches
constexpr int kOutputsPerWarp = 2;                 // gate/up launch: act outputs j per warp
constexpr int kChunksInFlight = 4;                 // down launch: 16-byte loads in flight per lane
constexpr std::size_t kMaxSmemBytes = 96u << 10;   // x of a token; one token's k activations

// Values per 16-byte chunk of a row.
template <typename T>
constexpr int kPerChunk = 16 / sizeof(T);
template <>
constexpr int kPerChunk<Mxfp4> = 32;

template <typename T>
constexpr std::int64_t row_bytes(int cols) {
  return std::int64_t{cols} * static_cast<std::int64_t>(sizeof(T));
}
template <>
constexpr std::int64_t row_bytes<Mxfp4>(int cols) {
  return cols / 2;
}

// Chunk q of row `row` of a stacked expert matrix of width `cols`.
template <typename T>
__device__ __forceinline__ uint4 load_chunk(const void* w, std::int64_t row, int cols, int q) {
  return load_stream(static_cast<const char*>(w) + row * row_bytes<T>(cols) + std::int64_t{q} * 16);
}

// Its scale (MXFP4: the E8M0 byte of that 32-value block; else 1).
template <typename T>
__device__ __forceinline__ float chunk_scale(const std::uint8_t*, std::int64_t, int, int) {
  return 1.0f;
}
template <>
__device__ __forceinline__ float chunk_scale<Mxfp4>(const std::uint8_t* scales, std::int64_t row, int cols, int q) {
  return mxfp4_scale(scales[row * (cols / 32) + q]);
}

// The chunk's values dotted with xs[0, kPerChunk<T>) (shared memory, 16-byte aligned), unscaled.
template <typename T>
__device__ __forceinline__ float dot_chunk(uint4 raw, const float* xs, const float* lut);
template <>
__device__ __forceinline__ float dot_chunk<float>(uint4 raw, const float* xs, const float*) {
  const float4 x = *reinterpret_cast<const float4*>(xs);
  return __uint_as_float(raw.x) * x.x + __uint_as_float(raw.y) * x.y + __uint_as_float(raw.z) * x.z +
         __uint_as_float(raw.w) * x.w;
}
__device__ __forceinline__ float2 pair_to_float2(std::uint32_t bits, __nv_bfloat16) {
  __nv_bfloat162 h;
  __builtin_memcpy(&h, &bits, 4);
  return __bfloat1622float2(h);
}
__device__ __forceinline__ float2 pair_to_float2(std::uint32_t bits, __half) {
  __half2 h;
  __builtin_memcpy(&h, &bits, 4);
  return __half22float2(h);
}
template <typename H>
__device__ __forceinline__ float dot_half_chunk(uint4 raw, const float* xs) {
  const float4 xa = *reinterpret_cast<const float4*>(xs);
  const float4 xb = *reinterpret_cast<const float4*>(xs + 4);
  const float2 w[4] = {pair_to_float2(raw.x, H{}), pair_to_float2(raw.y, H{}), pair_to_float2(raw.z, H{}),
                       pair_to_float2(raw.w, H{})};
  return w[0].x * xa.x + w[0].y * xa.y + w[1].x * xa.z + w[1].y * xa.w + w[2].x * xb.x + w[2].y * xb.y +
         w[3].x * xb.z + w[3].y * xb.w;
}
template <>
__device__ __forceinline__ float dot_chunk<__nv_bfloat16>(uint4 raw, const float* xs, const float*) {
  return dot_half_chunk<__nv_bfloat16>(raw, xs);
}
template <>
__device__ __forceinline__ float dot_chunk<__half>(uint4 raw, const float* xs, const float*) {
  return dot_half_chunk<__half>(raw, xs);
}
template <>
__device__ __forceinline__ float dot_chunk<Mxfp4>(uint4 raw, const float* xs, const float* lut) {
  const std::uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int b = 0; b < 4; ++b) {  // byte b of word i: values 8 i + 2 b (low nibble) and + 1
      const float2 x = *reinterpret_cast<const float2*>(xs + 8 * i + 2 * b);
      const std::uint32_t byte = words[i] >> (8 * b);
      acc += lut[byte & 0x0f] * x.x + lut[(byte >> 4) & 0x0f] * x.y;
    }
  }
  return acc;
}

// The E2M1 table in shared memory: 16 words in 16 banks, so any lookup pattern is conflict-free.
__device__ __forceinline__ void fill_lut(float* lut) {
  if (threadIdx.x < 16) lut[threadIdx.x] = mxfp4_e2m1(static_cast<int>(threadIdx.x));
}

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
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = warp_sum(acc[r]);
  if (lane != 0) return;
#pragma unroll
  for (int o = 0; o < kOutputsPerWarp; ++o) {
    if (!valid[2 * o]) continue;
    const float g = acc[2 * o] + moe_bias_at(bias, bias_dtype, rows[2 * o]);
    const float u = acc[2 * o + 1] + moe_bias_at(bias, bias_dtype, rows[2 * o + 1]);
    act[a * act_stride + j0 + o] = moe_activation(g, u, m);
  }
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
