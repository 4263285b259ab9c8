// The decode kernels of GGUF-block experts (moe_kernels.h, launch_moe_decode_quant): x and the
// activations quantized to int8 per 32 columns (the quantized GEMV's rule, quant_gemv.h), the
// chosen experts' rows read straight from their blocks and decoded one lane group at a time
// (quant_lane.cuh), dp4a dot products. Four launches after the routing: quantize x; gate/up with
// the activation (a warp per (pair, hidden unit): its gate and up rows); quantize the
// activations; down (a warp per (token, output row) over the token's k choices, weighted and
// summed with the down biases, straight into `out`: no atomics, deterministic).
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/moe_device.cuh"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/quant_gemv.h"
#include "backend/cuda/quant_lane.cuh"

namespace akv::cuda {
namespace {

using namespace quant;

constexpr int kWarps = 4;                                // per block
constexpr int kStageElems = 32 * kQuantGroup;            // a lane group each of 32 lanes
constexpr int kStageGroups = kStageElems / kQuantGroup;  // 32

template <GgmlType T>
constexpr int stage_bytes() {
  return kStageElems / Geometry<T>::kElems * Geometry<T>::kBytes;
}

// This lane's part of (weight group `group`) . (activation group `group`): the quantized GEMV's
// arithmetic (d * (lo * dot(q[0..3]) + hi * dot(q[4..7])) - mn * d * sum).
__device__ __forceinline__ float group_dot(const LaneWeights& w, const std::int8_t* codes,
                                           float2 ds) {
  const int4* xq = reinterpret_cast<const int4*>(codes);
  const int4 a = __ldg(xq), b = __ldg(xq + 1);
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

// acc[r] += this lane's part of row r . x for kR weight rows of `cols` columns against one
// quantized activation row (codes, per-group scales); the rows' loads are issued together.
template <GgmlType T, int kR>
__device__ __forceinline__ void lane_dots(const std::uint8_t* const (&rows)[kR],
                                          const std::int8_t* codes, const float2* scales, int cols,
                                          int lane, float (&acc)[kR]) {
  const int groups = cols / kQuantGroup;
#pragma unroll 2
  for (int st = 0; st * kStageGroups < groups; ++st) {
    const int group = st * kStageGroups + lane;
    if (group >= groups) break;  // past the row's end in its last stage
    LaneWeights w[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r)
      w[r] = decode<T>(rows[r] + std::int64_t{st} * stage_bytes<T>(), lane);
    const float2 ds = __ldg(scales + group);
#pragma unroll
    for (int r = 0; r < kR; ++r)
      acc[r] += group_dot(w[r], codes + std::int64_t{group} * kQuantGroup, ds);
  }
}

// act[a, j] = activation(gate_j . x_t + bias, up_j . x_t + bias) of pair a = blockIdx.y (token
// t = a / top_k) with its chosen expert's rows; a warp per hidden unit j.
template <GgmlType T>
__global__ void __launch_bounds__(kWarps * 32)
    gate_up_kernel(QuantActivations x, const std::uint8_t* __restrict__ w, std::int64_t row_bytes,
                   const float* __restrict__ route, std::int64_t route_stride, const void* bias,
                   DType bias_dtype, float* __restrict__ act, std::int64_t act_stride,
                   DeviceMoe m) {
  pdl_trigger();
  pdl_wait();
  const int a = static_cast<int>(blockIdx.y), token = a / m.top_k, choice = a % m.top_k;
  const int lane = threadIdx.x % 32;
  const int j = static_cast<int>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x / 32);
  if (j >= m.inter) return;  // the whole warp
  const int expert = static_cast<int>(route[token * route_stride + choice]);
  const std::int64_t row_g = std::int64_t{expert} * 2 * m.inter + (m.interleaved ? 2 * j : j);
  const std::int64_t row_u = row_g + (m.interleaved ? 1 : m.inter);
  const std::uint8_t* const rows[2] = {w + row_g * row_bytes, w + row_u * row_bytes};
  float acc[2] = {0.0f, 0.0f};
  lane_dots<T, 2>(
      rows, x.codes + std::int64_t{token} * m.hidden,
      reinterpret_cast<const float2*>(x.scales) + std::int64_t{token} * (m.hidden / kQuantGroup),
      m.hidden, lane, acc);
  const float g = warp_sum(acc[0]), u = warp_sum(acc[1]);
  if (lane == 0)
    act[a * act_stride + j] = moe_activation(g + moe_bias_at(bias, bias_dtype, row_g),
                                             u + moe_bias_at(bias, bias_dtype, row_u), m);
}

// out[t, r] = sum over the token's k choices of weight * (down row r of the expert . act of the
// pair + down bias); token t = blockIdx.y, a warp per output row r.
template <GgmlType T>
__global__ void __launch_bounds__(kWarps * 32)
    down_kernel(QuantActivations act, const std::uint8_t* __restrict__ w, std::int64_t row_bytes,
                const float* __restrict__ route, std::int64_t route_stride, const void* bias,
                DType bias_dtype, float* __restrict__ out, std::int64_t out_stride, DeviceMoe m) {
  pdl_trigger();
  pdl_wait();
  const int t = static_cast<int>(blockIdx.y), lane = threadIdx.x % 32;
  const int r = static_cast<int>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x / 32);
  if (r >= m.hidden) return;  // the whole warp
  const float* rt = route + t * route_stride;
  const int groups = m.inter / kQuantGroup;
  float acc = 0.0f, biases = 0.0f;
#pragma unroll 4
  for (int i = 0; i < m.top_k; ++i) {
    const int expert = static_cast<int>(rt[i]);
    const float wt = rt[m.top_k + i];
    const std::int64_t row = std::int64_t{expert} * m.hidden + r;
    const std::uint8_t* const rows[1] = {w + row * row_bytes};
    const std::int64_t a = std::int64_t{t} * m.top_k + i;
    float dot[1] = {0.0f};
    lane_dots<T, 1>(rows, act.codes + a * m.inter,
                    reinterpret_cast<const float2*>(act.scales) + a * groups, m.inter, lane, dot);
    acc += wt * dot[0];
    biases += wt * moe_bias_at(bias, bias_dtype, row);
  }
  acc = warp_sum(acc);
  if (lane == 0) out[t * out_stride + r] = acc + biases;
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

}  // namespace

bool moe_quant_supported(const MoeWeights& w, const MoeParams& p) {
  if (w.format != ExpertFormat::GgufBlocks || p.n_experts > kMoeMaxExperts || p.top_k > 32)
    return false;
  for (const WeightRef* m : {&w.gate_up, &w.down}) {
    const std::optional<GgmlType> g = find_ggml_type_of(m->dtype);
    if (!g || !quant_kernels_support(*g)) return false;
  }
  return true;
}

void launch_moe_decode_quant(TensorRef x, const MoeWeights& w, const MoeParams& p,
                             const MoeScratch& scratch, TensorRef out, Stream s) {
  AKV_CHECK(moe_quant_supported(w, p), "moe: GGUF experts of types the CUDA kernels read");
  const std::int64_t n = x.rows, hidden = x.cols, pairs = n * p.top_k;
  AKV_CHECK(hidden % kQuantGroup == 0 && p.inter % kQuantGroup == 0,
            "moe: GGUF experts of whole groups of 32");
  AKV_CHECK(pairs < (std::int64_t{1} << 16) && hidden < (std::int64_t{1} << 24),
            "moe: GGUF decode grid");
  const DeviceMoe m = device_moe(p, hidden);
  const QuantActivations xq = activations_in(scratch.down, n, hidden);
  const QuantActivations aq = activations_in(scratch.gate_up, pairs, p.inter);
  const auto* route = static_cast<const float*>(scratch.route.data);
  auto* act = static_cast<float*>(scratch.act.data);
  launch_quantize_activations(static_cast<const float*>(x.data), x.stride, n, hidden, xq, s);
  const GgmlType gu = ggml_type(w.gate_up.dtype), dn = ggml_type(w.down.dtype);
  dispatch_quant(gu, [&]<GgmlType T>() {
    launch(gate_up_kernel<T>, dim3(blocks_for(p.inter, kWarps), static_cast<unsigned>(pairs)),
           dim3(kWarps * 32), 0, s, xq, static_cast<const std::uint8_t*>(w.gate_up.data),
           quant_row_bytes(gu, hidden), route, scratch.route.stride, w.gate_up_bias.data,
           w.gate_up_bias.dtype, act, scratch.act.stride, m);
  });
  launch_quantize_activations(act, scratch.act.stride, pairs, p.inter, aq, s);
  dispatch_quant(dn, [&]<GgmlType T>() {
    launch(down_kernel<T>, dim3(blocks_for(hidden, kWarps), static_cast<unsigned>(n)),
           dim3(kWarps * 32), 0, s, aq, static_cast<const std::uint8_t*>(w.down.data),
           quant_row_bytes(dn, p.inter), route, scratch.route.stride, w.down_bias.data,
           w.down_bias.dtype, static_cast<float*>(out.data), out.stride, m);
  });
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
