// The decode kernels of GGUF-block experts and of MXFP4 experts as released (moe_kernels.h,
// launch_moe_decode_quant): x and the activations quantized to int8 per 32 columns (the
// quantized GEMV's rule, quant_gemv.h), the chosen experts' rows copied whole into shared memory
// (cp.async, 16-byte words, all of a warp's rows in flight at once; an MXFP4 row's nibbles and
// its scales side by side) and decoded from there one lane group at a time (quant_lane.cuh), dp4a
// dot products, the (row, group) items of a warp's rows spread over all 32 lanes. Two launches
// after the routing: gate/up, a block per (pair, 32 hidden units), a warp per kUnits of them
// (their gate and up rows), x quantized by each block into shared memory while the rows load,
// the block's 32 activations quantized as one group into scratch.gate_up; down, a warp per
// (token, output row) over the token's k choices (their rows issued before the wait for gate/up:
// the route is complete when down starts), the token's int8 activations copied into shared
// memory, weighted and summed with the down biases, straight into `out`: no atomics,
// deterministic.
#include <algorithm>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/moe_device.cuh"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/quant_gemv.h"
#include "backend/cuda/quant_lane.cuh"
#include "backend/cuda/quant_launch.cuh"

namespace akv::cuda {
namespace {

using namespace quant;

constexpr int kUnits = 4;                           // gate/up: hidden units per warp
constexpr int kGateUpWarps = kQuantGroup / kUnits;  // a block per 32 units: one activation group
constexpr int kGateUpRows = 2 * kUnits;             // gate/up: rows staged per warp
constexpr int kDownWarps = 8;                       // down: output rows per block (at most)
constexpr int kDownRows = 8;                        // down: rows staged per warp at once
constexpr int kStageElems = 32 * kQuantGroup;       // a lane group each of 32 lanes
constexpr int kStageGroups = kStageElems / kQuantGroup;  // 32
constexpr int kWindowStages = 2;                         // stages of a row staged at once
constexpr std::size_t kMaxSmemBytes = 200u << 10;        // dynamic shared memory cap, both launches

template <GgmlType T>
constexpr int stage_bytes() {
  return kStageElems / Geometry<T>::kElems * Geometry<T>::kBytes;
}

// Bytes of a window (at most kWindowStages stages) of a row and of the shared slot that holds it:
// the 16-byte words around it (an unaligned start and end add at most 30 bytes).
template <GgmlType T>
std::int64_t slot_bytes_for(std::int64_t row_bytes) {
  const std::int64_t window = std::min<std::int64_t>(row_bytes, kWindowStages * stage_bytes<T>());
  return (window + 15) / 16 * 16 + 32;
}

// Slots a down warp stages rows in: kDownRows, fewer when there are fewer choices (more blocks
// fit a multiprocessor's shared memory: GPT-OSS's top 4).
__host__ __device__ constexpr int down_slots(int top_k) {
  return top_k < kDownRows ? top_k : kDownRows;
}

// The int8 codes and float2 (d, d * sum of codes) scales of `cols` columns, then the staging
// slots: where the slots start in a block's dynamic shared memory.
__host__ __device__ constexpr std::int64_t codes_bytes(std::int64_t cols) {
  return (cols + cols / kQuantGroup * 8 + 15) / 16 * 16;
}

// This lane's part of (weight group) . (activation group: codes a, b, scales ds): the quantized
// GEMV's arithmetic (d * (lo * dot(q[0..3]) + hi * dot(q[4..7])) - mn * d * sum).
__device__ __forceinline__ float group_dot(const LaneWeights& w, int4 a, int4 b, float2 ds) {
  int lo = __dp4a(w.q[0], a.x, 0);
  lo = __dp4a(w.q[1], a.y, lo);
  lo = __dp4a(w.q[2], a.z, lo);
  lo = __dp4a(w.q[3], a.w, lo);
  int hi = __dp4a(w.q[4], b.x, 0);
  hi = __dp4a(w.q[5], b.y, hi);
  hi = __dp4a(w.q[6], b.z, hi);
  hi = __dp4a(w.q[7], b.w, hi);
  return ds.x * (w.lo * static_cast<float>(lo) + w.hi * static_cast<float>(hi)) - w.mn * ds.y;
}
// The same against a group's codes in shared memory (16-byte aligned).
__device__ __forceinline__ float group_dot(const LaneWeights& w, const std::int8_t* codes,
                                           float2 ds) {
  const int4* c = reinterpret_cast<const int4*>(codes);
  return group_dot(w, c[0], c[1], ds);
}

// decode<Q4_K> (quant_lane.cuh) of a stage at a 16-byte aligned address (shared memory): the
// same values from three 16-byte reads (the block's d, dmin and scales; the lane's 32 qs bytes)
// instead of a 4-byte read a word and a byte read a scale.
__device__ __forceinline__ LaneWeights decode_q4k_aligned(const std::uint8_t* stage, int lane) {
  const int sub = lane % 8, s = sub % 4;
  const std::uint8_t* b = stage + (lane / 8) * 144;
  const uint4 h = *reinterpret_cast<const uint4*>(b);  // d, dmin (h.x), scales[0..11] (h.y..h.w)
  const uint4* qs = reinterpret_cast<const uint4*>(b + 16 + (sub / 2) * 32);
  const uint4 v0 = qs[0], v1 = qs[1];
  const unsigned shift = 4 * (sub % 2);
  LaneWeights w;
  w.q[0] = static_cast<int>((v0.x >> shift) & 0x0f0f0f0fu);
  w.q[1] = static_cast<int>((v0.y >> shift) & 0x0f0f0f0fu);
  w.q[2] = static_cast<int>((v0.z >> shift) & 0x0f0f0f0fu);
  w.q[3] = static_cast<int>((v0.w >> shift) & 0x0f0f0f0fu);
  w.q[4] = static_cast<int>((v1.x >> shift) & 0x0f0f0f0fu);
  w.q[5] = static_cast<int>((v1.y >> shift) & 0x0f0f0f0fu);
  w.q[6] = static_cast<int>((v1.z >> shift) & 0x0f0f0f0fu);
  w.q[7] = static_cast<int>((v1.w >> shift) & 0x0f0f0f0fu);
  // k_scale_min: bytes s of scales[0..3] (h.y), [4..7] (h.z), [8..11] (h.w).
  const unsigned lo4 = (h.y >> (8 * s)) & 0xffu, mid4 = (h.z >> (8 * s)) & 0xffu,
                 hi4 = (h.w >> (8 * s)) & 0xffu;
  const int sc = static_cast<int>(sub < 4 ? lo4 & 0x3fu : (hi4 & 0xfu) | ((lo4 >> 2) & 0x30u));
  const int mn = static_cast<int>(sub < 4 ? mid4 & 0x3fu : (hi4 >> 4) | ((mid4 >> 2) & 0x30u));
  const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(h.x & 0xffffu)));
  const float dmin = __half2float(__ushort_as_half(static_cast<unsigned short>(h.x >> 16)));
  w.lo = w.hi = __fmul_rn(d, static_cast<float>(sc));
  w.mn = __fmul_rn(dmin, static_cast<float>(mn));
  return w;
}

// decode<T> of a staged stage: Q4_K at a 16-byte aligned address (rows of whole 16-byte words at
// an aligned start, as uploaded weights are) by 16-byte reads, everything else as quant_lane.cuh.
template <GgmlType T>
__device__ __forceinline__ LaneWeights decode_staged(const std::uint8_t* stage, int lane) {
  if constexpr (T == GgmlType::Q4_K) {
    if (reinterpret_cast<std::uintptr_t>(stage) % 16 == 0) return decode_q4k_aligned(stage, lane);
  }
  return decode<T>(stage, lane);
}

// Group g of 32 values quantized by 8 lanes (lane l8 = lane % 8 holding elements 4 l8 .. 4 l8 + 3
// in v): quantize_group's rule and results (the same amax, d and integer sum), four codes a
// lane stored as one word; `store`: whether g is one of the row's groups (the shuffles take every
// lane).
__device__ __forceinline__ void quantize_group8(float4 v, int l8, bool store, std::int8_t* codes,
                                                float2* scale) {
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.0f;
  const int q0 = amax == 0.0f ? 0 : __float2int_rn(v.x / d);
  const int q1 = amax == 0.0f ? 0 : __float2int_rn(v.y / d);
  const int q2 = amax == 0.0f ? 0 : __float2int_rn(v.z / d);
  const int q3 = amax == 0.0f ? 0 : __float2int_rn(v.w / d);
  int sum = q0 + q1 + q2 + q3;
#pragma unroll
  for (int o = 4; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (!store) return;
  reinterpret_cast<std::uint32_t*>(codes)[l8] = (static_cast<std::uint32_t>(q0) & 0xffu) |
                                                (static_cast<std::uint32_t>(q1) & 0xffu) << 8 |
                                                (static_cast<std::uint32_t>(q2) & 0xffu) << 16 |
                                                (static_cast<std::uint32_t>(q3) & 0xffu) << 24;
  if (l8 == 0) *scale = make_float2(d, d * static_cast<float>(sum));
}

// `len` bytes at `src` copied by the warp into `slot` (cp.async, the 16-byte words around them:
// at most len + 30 bytes): the first byte lands at slot + the returned offset (src's address mod
// 16, so 4-byte words keep their alignment).
__device__ __forceinline__ int stage_bytes_at(const std::uint8_t* src, std::int64_t len,
                                              std::uint8_t* slot, int lane) {
  const auto a = reinterpret_cast<std::uintptr_t>(src);
  const std::uintptr_t a0 = a & ~std::uintptr_t{15}, a1 = (a + len + 15) & ~std::uintptr_t{15};
  const int words = static_cast<int>((a1 - a0) / 16);
  for (int c = lane; c < words; c += 32)
    cp_async16(slot + 16 * c, reinterpret_cast<const void*>(a0 + 16 * c));
  return static_cast<int>(a & 15);
}

// Window `s0` (stages s0 .. s0 + kWindowStages - 1) of a row of row_bytes at `row` copied by
// the warp into `slot`; returns where its first byte lands (stage_bytes_at).
template <GgmlType T>
__device__ __forceinline__ int stage_window(const std::uint8_t* row, std::int64_t row_bytes, int s0,
                                            std::uint8_t* slot, int lane) {
  const std::int64_t first = std::int64_t{s0} * stage_bytes<T>();
  const std::int64_t len = min(row_bytes - first, std::int64_t{kWindowStages} * stage_bytes<T>());
  return stage_bytes_at(row + first, len, slot, lane);
}

// Where the rows of one stacked expert matrix lie: GGUF blocks, row r at data + r * row_bytes;
// MXFP4 as released, row r's nibbles at data + r * row_bytes (cols / 2) and its E8M0 scales at
// scales + r * scale_bytes (cols / 32).
struct ExpertRows {
  const std::uint8_t* data;
  std::int64_t row_bytes;
  const std::uint8_t* scales;
  std::int64_t scale_bytes;
};

// How the kernels stage and decode the rows of one format: slot_bytes (a slot holds one window
// of a row), stage (window s0 of a row into a slot, by the warp; returns the offset decode takes)
// and decode (group g of the staged window: lane weights as quant_lane.cuh's).
// GGUF blocks of type T: a window is kWindowStages stages of whole blocks.
template <GgmlType T>
struct GgufRows {
  static std::int64_t slot_bytes(const ExpertRows& r) { return slot_bytes_for<T>(r.row_bytes); }
  __device__ static int stage(const ExpertRows& r, std::int64_t row, int s0, std::uint8_t* slot,
                              int lane) {
    return stage_window<T>(r.data + row * r.row_bytes, r.row_bytes, s0, slot, lane);
  }
  __device__ static LaneWeights decode(const std::uint8_t* slot, int off, int g) {
    return decode_staged<T>(slot + off + (g / kStageGroups) * stage_bytes<T>(), g % kStageGroups);
  }
};

// MXFP4 as released: a window's nibbles (16 bytes a group, 16-byte aligned: rows are whole
// 16-byte words and the stack is aligned) at the slot's start, its scales kNibbles on.
struct SplitMxfp4Rows {
  static constexpr int kNibbles = kWindowStages * kStageGroups * 16;
  static constexpr int kScales = kWindowStages * kStageGroups;
  static std::int64_t slot_bytes(const ExpertRows&) { return kNibbles + kScales + 32; }
  __device__ static int stage(const ExpertRows& r, std::int64_t row, int s0, std::uint8_t* slot,
                              int lane) {
    const std::int64_t g0 = std::int64_t{s0} * kStageGroups;
    const std::int64_t nib0 = 16 * g0, nib_len = min(r.row_bytes - nib0, std::int64_t{kNibbles});
    const std::uint8_t* nib = r.data + row * r.row_bytes + nib0;
    for (int c = lane; c < nib_len / 16; c += 32) cp_async16(slot + 16 * c, nib + 16 * c);
    const std::int64_t sc_len = min(r.scale_bytes - g0, std::int64_t{kScales});
    return kNibbles +
           stage_bytes_at(r.scales + row * r.scale_bytes + g0, sc_len, slot + kNibbles, lane);
  }
  __device__ static LaneWeights decode(const std::uint8_t* slot, int off, int g) {
    return decode_mxfp4_split(*reinterpret_cast<const uint4*>(slot + 16 * g), slot[off + g]);
  }
};

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}

// Groups of window s0 of a row of `groups` groups.
__device__ __forceinline__ int window_groups(int groups, int s0) {
  return min(groups - s0 * kStageGroups, kWindowStages * kStageGroups);
}

// The activations of pair a = blockIdx.y (token t = a / top_k) for hidden units j = 32 *
// blockIdx.x + 0 .. 31 with its chosen expert's rows, activation(gate_j . x_t + bias, up_j . x_t
// + bias), quantized as one group into aq (row a); a warp per kUnits units. Dynamic shared
// memory: x's codes and scales (codes_bytes(hidden)), then kGateUpRows slots per warp.
template <class F>
__global__ void __launch_bounds__(kGateUpWarps * 32)
    gate_up_kernel(const float* __restrict__ x, std::int64_t x_stride, ExpertRows w,
                   const float* __restrict__ route, std::int64_t route_stride, const void* bias,
                   DType bias_dtype, QuantActivations aq, DeviceMoe m, int slot_bytes, bool x_vec) {
  extern __shared__ __align__(16) std::uint8_t smem[];
  __shared__ int offsets[kGateUpWarps][kGateUpRows];  // where each staged row starts in its slot
  __shared__ float unit_act[kQuantGroup];
  pdl_wait();
  pdl_trigger();  // after the wait: the down launch reads the route (complete by now) before its
                  // own wait
  const int a = static_cast<int>(blockIdx.y), token = a / m.top_k, choice = a % m.top_k;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int j0 =
      static_cast<int>(blockIdx.x) * kQuantGroup + warp * kUnits;  // < inter: whole groups
  const int groups = m.hidden / kQuantGroup, stages = (groups + kStageGroups - 1) / kStageGroups;
  auto* xc = reinterpret_cast<std::int8_t*>(smem);
  auto* xs = reinterpret_cast<float2*>(smem + m.hidden);
  std::uint8_t* slots =
      smem + codes_bytes(m.hidden) + std::int64_t{warp} * kGateUpRows * slot_bytes;
  const std::int64_t base =
      std::int64_t{static_cast<int>(route[token * route_stride + choice])} * 2 * m.inter;
  std::int64_t rows[kGateUpRows];
#pragma unroll
  for (int u = 0; u < kUnits; ++u) {
    rows[2 * u] = base + (m.interleaved ? 2 * (j0 + u) : j0 + u);
    rows[2 * u + 1] = base + (m.interleaved ? 2 * (j0 + u) + 1 : m.inter + j0 + u);
  }
  auto issue = [&](int s0) {
#pragma unroll
    for (int r = 0; r < kGateUpRows; ++r) {
      const int off = F::stage(w, rows[r], s0, slots + r * slot_bytes, lane);
      if (lane == 0) offsets[warp][r] = off;
    }
  };
  issue(0);  // in flight while x is quantized
  const float* xt = x + token * x_stride;
  if (x_vec) {  // 16-byte reads, 8 lanes a group, two passes' reads issued together
    constexpr int kPass = kGateUpWarps * 4;  // groups of the block per pass
    const int l8 = lane % 8;
    for (int base = warp * 4; base < groups; base += 2 * kPass) {  // warp-uniform: shuffles inside
      const int g0 = base + lane / 8;
      float4 v[2];
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const int g = g0 + p * kPass;
        v[p] = g < groups ? *reinterpret_cast<const float4*>(xt + g * kQuantGroup + 4 * l8)
                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const int g = g0 + p * kPass;
        quantize_group8(v[p], l8, g < groups, xc + g * kQuantGroup, xs + g);
      }
    }
  } else {
    for (int g = warp; g < groups; g += kGateUpWarps)
      quantize_group(xt[g * kQuantGroup + lane], lane, xc + g * kQuantGroup + lane, xs + g);
  }
  __syncthreads();
  float part[kGateUpRows] = {};
  for (int s0 = 0; s0 < stages; s0 += kWindowStages) {
    if (s0 > 0) {
      __syncwarp();  // every lane is done with the previous window
      issue(s0);
    }
    cp_async_wait_all();
    __syncwarp();
    int off[kGateUpRows];
#pragma unroll
    for (int r = 0; r < kGateUpRows; ++r) off[r] = offsets[warp][r];
    const int gw = window_groups(groups, s0);
    for (int g = lane; g < gw; g += 32) {  // a group of every row: x's codes read once
      const int group = s0 * kStageGroups + g;
      const int4* c = reinterpret_cast<const int4*>(xc + group * kQuantGroup);
      const int4 ca = c[0], cb = c[1];
      const float2 ds = xs[group];
#pragma unroll
      for (int r = 0; r < kGateUpRows; ++r)
        part[r] += group_dot(F::decode(slots + r * slot_bytes, off[r], g), ca, cb, ds);
    }
  }
#pragma unroll
  for (int u = 0; u < kUnits; ++u) {
    const float g = warp_sum(part[2 * u]), up = warp_sum(part[2 * u + 1]);
    if (lane == 0)
      unit_act[warp * kUnits + u] =
          moe_activation(g + moe_bias_at(bias, bias_dtype, rows[2 * u]),
                         up + moe_bias_at(bias, bias_dtype, rows[2 * u + 1]), m);
  }
  __syncthreads();
  if (warp != 0) return;
  const std::int64_t group = std::int64_t{a} * (m.inter / kQuantGroup) + blockIdx.x;
  quantize_group(unit_act[lane], lane, aq.codes + group * kQuantGroup + lane,
                 reinterpret_cast<float2*>(aq.scales) + group);
}

// out[t, r] = sum over the token's k choices of weight * (down row r of the expert . act of the
// pair + down bias); token t = blockIdx.y, a warp per output row r. Dynamic shared memory: the
// token's k activation rows' codes and scales (codes_bytes(top_k * inter)), then down_slots(top_k)
// slots per warp.
template <class F>
__global__ void __launch_bounds__(kDownWarps * 32)
    down_kernel(QuantActivations aq, ExpertRows w, const float* __restrict__ route,
                std::int64_t route_stride, const void* bias, DType bias_dtype,
                float* __restrict__ out, std::int64_t out_stride, DeviceMoe m, int slot_bytes) {
  extern __shared__ __align__(16) std::uint8_t smem[];
  __shared__ int offsets[kDownWarps][kDownRows];
  __shared__ int experts[32];
  __shared__ float weights[32];
  pdl_trigger();
  // The route comes from the launch before gate/up, which triggers this one only after its own
  // wait: it is complete, so the experts and each warp's first rows need not wait for gate/up
  // (read from L2: this multiprocessor's L1 may hold the previous layer's route).
  const int t = static_cast<int>(blockIdx.y);
  if (static_cast<int>(threadIdx.x) < m.top_k) {
    experts[threadIdx.x] = static_cast<int>(__ldcg(route + t * route_stride + threadIdx.x));
    weights[threadIdx.x] = __ldcg(route + t * route_stride + m.top_k + threadIdx.x);
  }
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x / 32);
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int r = static_cast<int>(blockIdx.x) * warps + warp;
  const bool active = r < m.hidden;
  const int groups = m.inter / kQuantGroup, stages = (groups + kStageGroups - 1) / kStageGroups;
  const int codes = m.top_k * m.inter, scales = m.top_k * groups;  // the token's
  auto* ac = reinterpret_cast<std::int8_t*>(smem);
  auto* as = reinterpret_cast<float2*>(smem + codes);
  std::uint8_t* slots =
      smem + codes_bytes(codes) + std::int64_t{warp} * down_slots(m.top_k) * slot_bytes;
  // Rows staged kDownRows choices at a time (i0 .. i0 + kDownRows - 1), each a window at a time.
  auto issue = [&](int i0, int s0) {
#pragma unroll
    for (int k = 0; k < kDownRows; ++k) {
      if (i0 + k < m.top_k) {
        const std::int64_t row = std::int64_t{experts[i0 + k]} * m.hidden + r;
        const int off = F::stage(w, row, s0, slots + k * slot_bytes, lane);
        if (lane == 0) offsets[warp][k] = off;
      }
    }
  };
  if (active) issue(0, 0);  // in flight while gate/up finishes
  pdl_wait();               // gate/up's activations (read from L2, as the route)
  const auto* src_codes = reinterpret_cast<const int4*>(aq.codes + std::int64_t{t} * codes);
  const auto* src_scales = reinterpret_cast<const float2*>(aq.scales) + std::int64_t{t} * scales;
  for (int i = static_cast<int>(threadIdx.x); i < codes / 16; i += static_cast<int>(blockDim.x))
    reinterpret_cast<int4*>(ac)[i] = __ldcg(src_codes + i);
  for (int i = static_cast<int>(threadIdx.x); i < scales; i += static_cast<int>(blockDim.x))
    as[i] = __ldcg(src_scales + i);
  __syncthreads();
  if (!active) return;  // the whole warp, no copies in flight
  float acc = 0.0f;
  for (int i0 = 0; i0 < m.top_k; i0 += kDownRows) {
    const int n_rows = min(kDownRows, m.top_k - i0);
    for (int s0 = 0; s0 < stages; s0 += kWindowStages) {
      if (i0 > 0 || s0 > 0) {
        __syncwarp();  // every lane is done with the previous window
        issue(i0, s0);
      }
      cp_async_wait_all();
      __syncwarp();
      const int gw = window_groups(groups, s0);
      // Items (row k, group g) of the window, k * gw + g = lane, lane + 32, ...: every lane busy.
      int k = lane / gw, g = lane - k * gw;
      for (; k < n_rows; g += 32) {
        while (g >= gw) g -= gw, ++k;
        if (k >= n_rows) break;
        const int group = s0 * kStageGroups + g, i = i0 + k;
        acc += weights[i] * group_dot(F::decode(slots + k * slot_bytes, offsets[warp][k], g),
                                      ac + (i * m.inter + group * kQuantGroup),
                                      as[i * groups + group]);
      }
    }
  }
  acc = warp_sum(acc);
  if (lane != 0) return;
  float biases = 0.0f;
  if (bias != nullptr)
    for (int i = 0; i < m.top_k; ++i)
      biases += weights[i] * moe_bias_at(bias, bias_dtype, std::int64_t{experts[i]} * m.hidden + r);
  out[std::int64_t{t} * out_stride + r] = acc + biases;
}

template <typename F>
void dispatch_quant(GgmlType t, F&& f) {
  switch (t) {
    case GgmlType::Q8_0:
      return f.template operator()<GgmlType::Q8_0>();
    case GgmlType::Q4_0:
      return f.template operator()<GgmlType::Q4_0>();
    case GgmlType::MXFP4:
      return f.template operator()<GgmlType::MXFP4>();
    case GgmlType::Q4_K:
      return f.template operator()<GgmlType::Q4_K>();
    case GgmlType::Q5_K:
      return f.template operator()<GgmlType::Q5_K>();
    case GgmlType::Q6_K:
      return f.template operator()<GgmlType::Q6_K>();
    default:
      AKV_CHECK(false, "moe: GGUF expert type without CUDA kernels");
  }
}

GgmlType ggml_type(DType t) {
  const std::optional<GgmlType> g = find_ggml_type_of(t);
  AKV_CHECK(g.has_value(), "moe: GGUF expert type");
  return *g;
}

// QuantActivations of [n, cols] in the unused f32 scratch `t` (from its first 16-byte boundary).
QuantActivations activations_in(TensorRef t, std::int64_t n, std::int64_t cols) {
  const auto p = reinterpret_cast<std::uintptr_t>(t.data), aligned = (p + 15) & ~std::uintptr_t{15};
  const auto bytes = static_cast<std::size_t>(((t.rows - 1) * t.stride + t.cols) * 4);
  AKV_CHECK(quant_activation_bytes(n, cols) + (aligned - p) <= bytes,
            "moe: scratch for the int8 activations");
  return quant_activations_in(reinterpret_cast<void*>(aligned), n, cols);
}

// Allows `kernel` kMaxSmemBytes of dynamic shared memory (once) and checks `bytes` fits.
template <typename K>
void allow_smem(K kernel, bool& done, std::size_t bytes) {
  AKV_CHECK(bytes <= kMaxSmemBytes,
            "moe: GGUF decode shared memory (expert width times choices too large)");
  if (done) return;
  AKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(kMaxSmemBytes)));
  done = true;
}

// What both launches of one call take.
struct DecodeArgs {
  TensorRef x, route, out;
  const MoeWeights& w;
  const MoeParams& p;
  DeviceMoe m;
  QuantActivations aq;
  Stream s;
};

template <class F>
void launch_gate_up(const DecodeArgs& a, const ExpertRows& rows) {
  static bool smem_set = false;  // one a format; the engine thread is the only caller
  const std::int64_t hidden = a.x.cols, pairs = a.x.rows * a.p.top_k, slot = F::slot_bytes(rows);
  const auto smem =
      static_cast<std::size_t>(codes_bytes(hidden) + kGateUpWarps * kGateUpRows * slot);
  allow_smem(gate_up_kernel<F>, smem_set, smem);
  const bool x_vec = reinterpret_cast<std::uintptr_t>(a.x.data) % 16 == 0 && a.x.stride % 4 == 0;
  launch(gate_up_kernel<F>,
         dim3(static_cast<unsigned>(a.p.inter / kQuantGroup), static_cast<unsigned>(pairs)),
         dim3(kGateUpWarps * 32), smem, a.s, static_cast<const float*>(a.x.data), a.x.stride, rows,
         static_cast<const float*>(a.route.data), a.route.stride, a.w.gate_up_bias.data,
         a.w.gate_up_bias.dtype, a.aq, a.m, static_cast<int>(slot), x_vec);
}

template <class F>
void launch_down(const DecodeArgs& a, const ExpertRows& rows) {
  static bool smem_set = false;
  const std::int64_t slot = F::slot_bytes(rows);
  int warps = kDownWarps;  // fewer where long rows would pass the shared memory cap
  const auto smem_for = [&](int k) {
    return static_cast<std::size_t>(codes_bytes(a.p.top_k * a.p.inter) +
                                    k * down_slots(static_cast<int>(a.p.top_k)) * slot);
  };
  while (warps > 1 && smem_for(warps) > kMaxSmemBytes) warps /= 2;
  allow_smem(down_kernel<F>, smem_set, smem_for(warps));
  launch(down_kernel<F>, dim3(blocks_for(a.x.cols, warps), static_cast<unsigned>(a.x.rows)),
         dim3(warps * 32), smem_for(warps), a.s, a.aq, rows,
         static_cast<const float*>(a.route.data), a.route.stride, a.w.down_bias.data,
         a.w.down_bias.dtype, static_cast<float*>(a.out.data), a.out.stride, a.m,
         static_cast<int>(slot));
}

ExpertRows gguf_rows(const WeightRef& w) {
  return {static_cast<const std::uint8_t*>(w.data), quant_row_bytes(ggml_type(w.dtype), w.cols),
          nullptr, 0};
}
ExpertRows mxfp4_rows(const WeightRef& w, const WeightRef& scales) {
  return {static_cast<const std::uint8_t*>(w.data), w.cols / 2,
          static_cast<const std::uint8_t*>(scales.data), w.cols / 32};
}

bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

}  // namespace

bool moe_quant_supported(const MoeWeights& w, const MoeParams& p) {
  if (p.n_experts > kMoeMaxExperts || p.top_k > 32) return false;
  if (w.format == ExpertFormat::Mxfp4)  // 16-byte nibble words: whole groups, aligned stacks
    return w.gate_up.cols % kQuantGroup == 0 && w.down.cols % kQuantGroup == 0 &&
           aligned16(w.gate_up.data) && aligned16(w.down.data) && !w.gate_up_scales.empty() &&
           !w.down_scales.empty();
  if (w.format != ExpertFormat::GgufBlocks) return false;
  for (const WeightRef* m : {&w.gate_up, &w.down}) {
    const std::optional<GgmlType> g = find_ggml_type_of(m->dtype);
    if (!g || !quant_kernels_support(*g)) return false;
  }
  return true;
}

void launch_moe_decode_quant(TensorRef x, const MoeWeights& w, const MoeParams& p,
                             const MoeScratch& scratch, TensorRef out, Stream s) {
  AKV_CHECK(moe_quant_supported(w, p),
            "moe: GGUF experts of types the CUDA kernels read, or aligned MXFP4 experts");
  const std::int64_t n = x.rows, hidden = x.cols, pairs = n * p.top_k;
  AKV_CHECK(hidden % kQuantGroup == 0 && p.inter % kQuantGroup == 0,
            "moe: GGUF experts of whole groups of 32");
  AKV_CHECK(pairs < (std::int64_t{1} << 16) && n < (std::int64_t{1} << 16) &&
                hidden < (std::int64_t{1} << 24),
            "moe: GGUF decode grid");
  const DecodeArgs a{x,
                     scratch.route,
                     out,
                     w,
                     p,
                     device_moe(p, hidden),
                     activations_in(scratch.gate_up, pairs, p.inter),
                     s};
  if (w.format == ExpertFormat::Mxfp4) {
    launch_gate_up<SplitMxfp4Rows>(a, mxfp4_rows(w.gate_up, w.gate_up_scales));
    launch_down<SplitMxfp4Rows>(a, mxfp4_rows(w.down, w.down_scales));
  } else {
    dispatch_quant(ggml_type(w.gate_up.dtype),
                   [&]<GgmlType T>() { launch_gate_up<GgufRows<T>>(a, gguf_rows(w.gate_up)); });
    dispatch_quant(ggml_type(w.down.dtype),
                   [&]<GgmlType T>() { launch_down<GgufRows<T>>(a, gguf_rows(w.down)); });
  }
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
