// Shared by the int8 decode kernels of quantized experts (moe_kernels.h, launch_moe_decode_quant):
// moe_decode_quant.cu stages each row a window at a time (any width), moe_decode_runs.cu stages
// each warp's rows whole as runs of consecutive rows (the default where they fit). Both use the
// launch constants below, the formats' staging and decoding (GGUF blocks of a type; MXFP4 as
// released) and the int8 rules of the quantized GEMV (quant_gemv.h).
#pragma once

#include <algorithm>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/mma_util.cuh"
#include "backend/cuda/moe_device.cuh"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/quant_gemv.h"
#include "backend/cuda/quant_lane.cuh"
#include "backend/cuda/quant_launch.cuh"

namespace akv::cuda::moe_quant {

using quant::decode;
using quant::decode_mxfp4_split;
using quant::Geometry;
using quant::LaneWeights;

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

// x (a token's `groups` groups of 32 floats) quantized to int8 per group by a block of
// kGateUpWarps warps into shared memory: codes xc, scales xs. x_vec: x is 16-byte aligned, read
// 16 bytes a lane (8 lanes a group, two passes' reads issued together); else a warp a group.
__device__ __forceinline__ void quantize_x(const float* __restrict__ xt, int groups, bool x_vec,
                                           std::int8_t* xc, float2* xs) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  if (x_vec) {
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
}

// Gate/up's end, both stagings: unit u of this warp (its gate and up sums, this lane's parts;
// their rows of the stack for the biases) summed over the warp and activated into
// unit_act[warp * kUnits + u]; then, once every warp has, warp 0 quantizes the block's 32
// activations as one group of pair a's row of aq (the int8 codes down reads). Every thread of the
// block calls it.
__device__ __forceinline__ void store_activations(
    const float (&gate)[kUnits], const float (&up)[kUnits], const std::int64_t (&gate_row)[kUnits],
    const std::int64_t (&up_row)[kUnits], const void* bias, DType bias_dtype, const DeviceMoe& m,
    int a, QuantActivations aq, float* unit_act) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
  for (int u = 0; u < kUnits; ++u) {
    const float g = warp_sum(gate[u]), v = warp_sum(up[u]);
    if (lane == 0)
      unit_act[warp * kUnits + u] = moe_activation(g + moe_bias_at(bias, bias_dtype, gate_row[u]),
                                                   v + moe_bias_at(bias, bias_dtype, up_row[u]), m);
  }
  __syncthreads();
  if (warp != 0) return;
  const std::int64_t group = std::int64_t{a} * (m.inter / kQuantGroup) + blockIdx.x;
  quantize_group(unit_act[lane], lane, aq.codes + group * kQuantGroup + lane,
                 reinterpret_cast<float2*>(aq.scales) + group);
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
  // A run: rows row0 .. row0 + n - 1 whole, one contiguous copy.
  __device__ static int stage_run(const ExpertRows& r, std::int64_t row0, int n, std::uint8_t* slot,
                                  int lane) {
    return stage_bytes_at(r.data + row0 * r.row_bytes, n * r.row_bytes, slot, lane);
  }
  __device__ static LaneWeights decode_run(const std::uint8_t* slot, int off, int row_bytes, int,
                                           int i, int g) {
    return decode(slot + i * row_bytes, off, g);
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
  // A run: the nibbles of rows row0 .. row0 + n - 1 (contiguous, whole 16-byte words) at the
  // slot's start, then their scales (contiguous too); returns where the scales begin.
  __device__ static int stage_run(const ExpertRows& r, std::int64_t row0, int n, std::uint8_t* slot,
                                  int lane) {
    const std::uint8_t* nib = r.data + row0 * r.row_bytes;
    const int nib_bytes = n * static_cast<int>(r.row_bytes);
    for (int c = lane; c < nib_bytes / 16; c += 32) cp_async16(slot + 16 * c, nib + 16 * c);
    return nib_bytes + stage_bytes_at(r.scales + row0 * r.scale_bytes, n * r.scale_bytes,
                                      slot + nib_bytes, lane);
  }
  __device__ static LaneWeights decode_run(const std::uint8_t* slot, int off, int row_bytes,
                                           int scale_bytes, int i, int g) {
    return decode_mxfp4_split(*reinterpret_cast<const uint4*>(slot + i * row_bytes + 16 * g),
                              slot[off + i * scale_bytes + g]);
  }
};

// Shared-memory bytes of a run of n rows (stage_run's copy: the 16-byte words around it).
inline std::int64_t run_slot_bytes(const ExpertRows& r, int n) {
  return (n * (r.row_bytes + r.scale_bytes) + 15) / 16 * 16 + 32;
}

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}

// Groups of window s0 of a row of `groups` groups.
__device__ __forceinline__ int window_groups(int groups, int s0) {
  return min(groups - s0 * kStageGroups, kWindowStages * kStageGroups);
}

// The down kernels' prologue, in two steps. down_route: token t's experts and weights into shared
// memory, then a block barrier. The route comes from the launch before gate/up, which triggers
// down only after its own wait: it is complete, so a down block reads it (and issues its first
// rows) before it waits for gate/up; read from L2 (__ldcg): this multiprocessor's L1 may hold the
// previous layer's route.
__device__ __forceinline__ void down_route(const float* __restrict__ route,
                                           std::int64_t route_stride, int t, int top_k,
                                           int* experts, float* weights) {
  if (static_cast<int>(threadIdx.x) < top_k) {
    experts[threadIdx.x] = static_cast<int>(__ldcg(route + t * route_stride + threadIdx.x));
    weights[threadIdx.x] = __ldcg(route + t * route_stride + top_k + threadIdx.x);
  }
  __syncthreads();
}

// down_activations, after pdl_wait: token t's int8 activations (`codes` codes and `scales`
// scales, all its choices') from gate/up's output into shared memory (from L2, as the route), then
// a block barrier.
__device__ __forceinline__ void down_activations(const QuantActivations& aq, int t, int codes,
                                                 int scales, std::int8_t* ac, float2* as) {
  const auto* src_codes = reinterpret_cast<const int4*>(aq.codes + std::int64_t{t} * codes);
  const auto* src_scales = reinterpret_cast<const float2*>(aq.scales) + std::int64_t{t} * scales;
  for (int i = static_cast<int>(threadIdx.x); i < codes / 16; i += static_cast<int>(blockDim.x))
    reinterpret_cast<int4*>(ac)[i] = __ldcg(src_codes + i);
  for (int i = static_cast<int>(threadIdx.x); i < scales; i += static_cast<int>(blockDim.x))
    as[i] = __ldcg(src_scales + i);
  __syncthreads();
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

inline GgmlType ggml_type(DType t) {
  const std::optional<GgmlType> g = find_ggml_type_of(t);
  AKV_CHECK(g.has_value(), "moe: GGUF expert type");
  return *g;
}

// QuantActivations of [n, cols] in the unused f32 scratch `t` (from its first 16-byte boundary).
inline QuantActivations activations_in(TensorRef t, std::int64_t n, std::int64_t cols) {
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
  int sm_count;  // the device's multiprocessors: how many blocks make one wave
};

inline ExpertRows gguf_rows(const WeightRef& w) {
  return {static_cast<const std::uint8_t*>(w.data), quant_row_bytes(ggml_type(w.dtype), w.cols),
          nullptr, 0};
}
inline ExpertRows mxfp4_rows(const WeightRef& w, const WeightRef& scales) {
  return {static_cast<const std::uint8_t*>(w.data), w.cols / 2,
          static_cast<const std::uint8_t*>(scales.data), w.cols / 32};
}

inline bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

// moe_decode_runs.cu: the same two launches with each warp's rows staged whole, as runs of
// consecutive rows (one or two contiguous copies a warp instead of a copy per row and window).
// Each returns false, launching nothing, where its block's shared memory would pass
// kRunsMaxSmemBytes (two blocks a multiprocessor; gate/up: in runs of 2 rows, its smallest
// form); the windowed launch then runs instead.
inline constexpr std::size_t kRunsMaxSmemBytes = 112u << 10;
bool launch_gate_up_runs(const DecodeArgs& a);
bool launch_down_runs(const DecodeArgs& a);

}  // namespace akv::cuda::moe_quant
