// The MoE decode kernels of moe_decode.cu (same grids, outputs and per-lane summation order)
// arranged to hide DRAM latency, the cost of a batch-1 step whose k experts' rows are short:
// each warp issues its first expert-row loads (and their MXFP4 scales) before the block stages x
// or the activations in shared memory, so the staging runs under the loads (the down launch even
// before gate/up has finished: gate/up lets it start only once the route is complete, and it
// reads the route before its own wait); while a warp computes
// on one chunk column it keeps the next ones in flight (a ring of registers); the staging is
// float4 and division-free; MXFP4 nibbles index the E2M1 table by byte offset, and x is read once
// per chunk for all rows that share it. The two-launch kernels stay as the baseline.
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/moe_decode_chunk.cuh"
#include "backend/cuda/moe_device.cuh"
#include "backend/cuda/moe_kernels.h"

namespace akv::cuda {
namespace {

constexpr int kWarps = 8;           // per block, both launches
constexpr int kOutputsPerWarp = 2;  // gate/up launch: act outputs j per warp
constexpr int kRows = 2 * kOutputsPerWarp;
constexpr int kGateUpDepth = 2;  // gate/up: chunk columns in flight per lane (kRows loads each)
constexpr int kDownDepth = 8;     // down: chunks in flight per lane
constexpr int kMinBlocks = 3;     // per multiprocessor (a register cap): one wave for the Qwen3-30B-A3B shape
template <typename T>
constexpr int kGateUpMinBlocks = kMinBlocks;
template <>
constexpr int kGateUpMinBlocks<Mxfp4> = 2;  // its 32-value chunks would spill under the cap
constexpr std::size_t kMaxSmemBytes = 96u << 10;

// dst[0, n) = scale * src[0, n) by the whole block; float4 when `vec` (src 16-byte aligned, n % 4 == 0).
__device__ __forceinline__ void stage(const float* src, float* dst, int n, bool vec, float scale) {
  if (vec) {
    const auto* s4 = reinterpret_cast<const float4*>(src);
    auto* d4 = reinterpret_cast<float4*>(dst);
    for (int c = threadIdx.x; c < n / 4; c += blockDim.x) {
      const float4 v = s4[c];
      d4[c] = make_float4(scale * v.x, scale * v.y, scale * v.z, scale * v.w);
    }
  } else {
    for (int c = threadIdx.x; c < n; c += blockDim.x) dst[c] = scale * src[c];
  }
}

// out[r] = chunk raw[r] dotted with xs[0, kPerChunk<T>) (shared memory, 16-byte aligned), unscaled,
// for R rows sharing the same x; the same per-row order of operations as dot_chunk.
template <typename T, int R>
__device__ __forceinline__ void dot_rows(const uint4 (&raw)[R], const float* xs, const float* lut, float (&out)[R]) {
#pragma unroll
  for (int r = 0; r < R; ++r) out[r] = dot_chunk<T>(raw[r], xs, lut);  // x loads are common: the compiler shares them
}
template <int R>
__device__ __forceinline__ void dot_rows_mxfp4(const uint4 (&raw)[R], const float* xs, const float* lut,
                                               float (&out)[R]) {
  const char* table = reinterpret_cast<const char*>(lut);
#pragma unroll
  for (int r = 0; r < R; ++r) out[r] = 0.0f;
#pragma unroll 1  // rolled: fewer live registers (the words of all rows in flight stay put)
  for (int i = 0; i < 4; ++i) {  // word i: values 8 i .. 8 i + 7
    const float4 xa = *reinterpret_cast<const float4*>(xs + 8 * i);
    const float4 xb = *reinterpret_cast<const float4*>(xs + 8 * i + 4);
    const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
    for (int r = 0; r < R; ++r) {
      std::uint32_t word = i == 0 ? raw[r].x : i == 1 ? raw[r].y : i == 2 ? raw[r].z : raw[r].w;
#pragma unroll
      for (int b = 0; b < 4; ++b) {  // byte b: low nibble value 2 b, high nibble 2 b + 1; table offset 4 * nibble
        const float lo = *reinterpret_cast<const float*>(table + ((word << 2) & 0x3c));
        const float hi = *reinterpret_cast<const float*>(table + ((word >> 2) & 0x3c));
        out[r] += lo * xv[2 * b] + hi * xv[2 * b + 1];
        word >>= 8;
      }
    }
  }
}
template <>
__device__ __forceinline__ void dot_rows<Mxfp4, kRows>(const uint4 (&raw)[kRows], const float* xs, const float* lut,
                                                       float (&out)[kRows]) {
  dot_rows_mxfp4<kRows>(raw, xs, lut, out);
}
template <>
__device__ __forceinline__ void dot_rows<Mxfp4, 1>(const uint4 (&raw)[1], const float* xs, const float* lut,
                                                   float (&out)[1]) {
  dot_rows_mxfp4<1>(raw, xs, lut, out);
}

// grid (ceil(inter / (kWarps * kOutputsPerWarp)), n * top_k); dynamic shared memory: hidden floats.
template <typename T>
__global__ void __launch_bounds__(kWarps * 32, kGateUpMinBlocks<T>)
    moe_gate_up_pipelined_kernel(const float* x, std::int64_t x_stride, bool x_vec, const void* w,
                                 const std::uint8_t* scales, const void* bias, DType bias_dtype, const float* route,
                                 std::int64_t route_stride, float* act, std::int64_t act_stride, DeviceMoe m) {
  extern __shared__ float4 smem[];
  float* xs = reinterpret_cast<float*>(smem);  // [hidden]
  __shared__ float lut[16];
  fill_lut(lut);
  pdl_wait();
  pdl_trigger();  // after the wait: the down launch reads the route (complete by now) before its own wait
  const int a = blockIdx.y, token = a / m.top_k, choice = a % m.top_k;
  const int expert = static_cast<int>(route[token * route_stride + choice]);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int j0 = (blockIdx.x * kWarps + warp) * kOutputsPerWarp;
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
  const int n_chunks = m.hidden / kPerChunk<T>;
  uint4 raw[kGateUpDepth][kRows];
  float scale[kGateUpDepth][kRows];
  auto issue = [&](int d, int q) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const bool on = valid[r] && q < n_chunks;
      raw[d][r] = on ? load_chunk<T>(w, rows[r], m.hidden, q) : uint4{};
      scale[d][r] = on ? chunk_scale<T>(scales, rows[r], m.hidden, q) : 0.0f;
    }
  };
#pragma unroll
  for (int d = 0; d < kGateUpDepth; ++d) issue(d, lane + 32 * d);  // in flight during the staging
  stage(x + token * x_stride, xs, m.hidden, x_vec, 1.0f);
  __syncthreads();
  if (j0 >= m.inter) return;
  float acc[kRows] = {};
  for (int q0 = lane; q0 < n_chunks; q0 += 32 * kGateUpDepth) {
#pragma unroll
    for (int d = 0; d < kGateUpDepth; ++d) {
      const int q = q0 + 32 * d;
      if (q >= n_chunks) break;
      float part[kRows];
      dot_rows<T, kRows>(raw[d], xs + q * kPerChunk<T>, lut, part);
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r] += part[r] * scale[d][r];
      issue(d, q + 32 * kGateUpDepth);
    }
  }
  store_gate_up<kOutputsPerWarp>(acc, rows, valid, bias, bias_dtype, m, act + a * act_stride + j0);
}

// grid (ceil(hidden / kWarps), n); dynamic shared memory: top_k * inter floats.
template <typename T>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    moe_down_pipelined_kernel(const float* act, std::int64_t act_stride, bool act_vec, const void* w,
                              const std::uint8_t* scales, const void* bias, DType bias_dtype, const float* route,
                              std::int64_t route_stride, float* out, std::int64_t out_stride, DeviceMoe m) {
  extern __shared__ float4 smem[];
  float* acts = reinterpret_cast<float*>(smem);  // [top_k][inter], each times its routing weight
  __shared__ float lut[16];
  __shared__ int experts[32];
  __shared__ float weights[32];
  fill_lut(lut);
  pdl_trigger();
  // The route comes from the launch before gate/up, which triggers this one only after its own
  // wait: it is complete, so the experts and each warp's first row loads need not wait for
  // gate/up (read from L2: this multiprocessor's L1 may hold the previous layer's route).
  const int t = blockIdx.y;
  if (threadIdx.x < m.top_k) {
    experts[threadIdx.x] = static_cast<int>(__ldcg(route + t * route_stride + threadIdx.x));
    weights[threadIdx.x] = __ldcg(route + t * route_stride + m.top_k + threadIdx.x);
  }
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const int r = blockIdx.x * kWarps + threadIdx.x / 32;
  const bool active = r < m.hidden;
  // The token's k rows r of down, one after another: each lane walks chunk q = lane, lane + 32,
  // ... (chunk col of expert k, q = k * per_row + col), kDownDepth chunks ahead of its sums.
  constexpr int kDepth = kDownDepth;
  const int per_row = m.inter / kPerChunk<T>;
  int next_k = 0, next_col = lane;  // the next chunk to load
  while (next_col >= per_row && next_k < m.top_k) next_col -= per_row, ++next_k;
  uint4 raw[kDepth][1];
  float scale[kDepth];
  int offset[kDepth];  // where the chunk's activations start in `acts`; -1: past the last chunk
  auto issue = [&](int d) {
    offset[d] = -1;
    if (active && next_k < m.top_k) {
      const std::int64_t row = std::int64_t{experts[next_k]} * m.hidden + r;
      raw[d][0] = load_chunk<T>(w, row, m.inter, next_col);
      scale[d] = chunk_scale<T>(scales, row, m.inter, next_col);
      offset[d] = next_k * m.inter + next_col * kPerChunk<T>;
    }
    next_col += 32;
    while (next_col >= per_row && next_k < m.top_k) next_col -= per_row, ++next_k;
  };
#pragma unroll
  for (int d = 0; d < kDepth; ++d) issue(d);  // in flight while gate/up finishes and during the staging
  pdl_wait();  // gate/up's activations
  for (int k = 0; k < m.top_k; ++k)
    stage(act + (std::int64_t{t} * m.top_k + k) * act_stride, acts + k * m.inter, m.inter, act_vec, weights[k]);
  __syncthreads();
  if (!active) return;
  float acc = 0.0f;
  for (bool more = true; more;) {
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      if (offset[d] < 0) {
        more = false;
        break;
      }
      float part[1];
      dot_rows<T, 1>(raw[d], acts + offset[d], lut, part);
      acc += part[0] * scale[d];
      issue(d);
    }
  }
  acc = warp_sum(acc);
  if (lane != 0) return;
  float b = 0.0f;
  if (bias != nullptr)
    for (int k = 0; k < m.top_k; ++k)
      b += weights[k] * moe_bias_at(bias, bias_dtype, std::int64_t{experts[k]} * m.hidden + r);
  out[std::int64_t{t} * out_stride + r] = acc + b;
}

bool vec_rows(TensorRef t) { return reinterpret_cast<std::uintptr_t>(t.data) % 16 == 0 && t.stride % 4 == 0; }

template <typename T>
void launch_pipelined(TensorRef x, const MoeWeights& w, const DeviceMoe& m, const MoeScratch& s, TensorRef out, int n,
                      Stream st) {
  const float* route = static_cast<const float*>(s.route.data);
  const std::size_t x_smem = static_cast<std::size_t>(m.hidden) * sizeof(float);
  const std::size_t act_smem = static_cast<std::size_t>(m.top_k) * m.inter * sizeof(float);
  static bool attributes_set = false;  // the engine thread is the only caller
  if (!attributes_set) {  // more than the default 48 KiB of dynamic shared memory
    AKV_CUDA_CHECK(cudaFuncSetAttribute(moe_gate_up_pipelined_kernel<T>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kMaxSmemBytes)));
    AKV_CUDA_CHECK(cudaFuncSetAttribute(moe_down_pipelined_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(kMaxSmemBytes)));
    attributes_set = true;
  }
  launch(moe_gate_up_pipelined_kernel<T>, dim3(blocks_for(m.inter, kWarps * kOutputsPerWarp), n * m.top_k),
         kWarps * 32, x_smem, st, static_cast<const float*>(x.data), x.stride, vec_rows(x), w.gate_up.data,
         static_cast<const std::uint8_t*>(w.gate_up_scales.data), w.gate_up_bias.data, w.gate_up_bias.dtype, route,
         s.route.stride, static_cast<float*>(s.act.data), s.act.stride, m);
  launch(moe_down_pipelined_kernel<T>, dim3(blocks_for(m.hidden, kWarps), n), kWarps * 32, act_smem, st,
         static_cast<const float*>(s.act.data), s.act.stride, vec_rows(s.act), w.down.data,
         static_cast<const std::uint8_t*>(w.down_scales.data), w.down_bias.data, w.down_bias.dtype, route,
         s.route.stride, static_cast<float*>(out.data), out.stride, m);
}

}  // namespace

void launch_moe_decode_pipelined(TensorRef x, const MoeWeights& w, const MoeParams& p, const MoeScratch& scratch,
                                 TensorRef out, Stream s) {
  AKV_CHECK(moe_decode_supported(x, w, p), "moe decode: unsupported shape");
  const DeviceMoe m = device_moe(p, x.cols);
  const int n = static_cast<int>(x.rows);
  if (w.format == ExpertFormat::Mxfp4) {
    launch_pipelined<Mxfp4>(x, w, m, scratch, out, n, s);
  } else {
    dispatch_float(w.gate_up.dtype, [&](auto tag) { launch_pipelined<decltype(tag)>(x, w, m, scratch, out, n, s); });
  }
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
