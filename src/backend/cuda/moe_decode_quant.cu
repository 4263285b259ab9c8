// The windowed decode kernels of GGUF-block experts and of MXFP4 experts as released
// (moe_kernels.h, launch_moe_decode_quant; what they share is in moe_decode_quant.cuh): each chosen
// expert row is copied into shared memory a window of kWindowStages stages at a time (cp.async,
// 16-byte words; an MXFP4 row's nibbles and its scales side by side), so any width fits, and
// decoded from there one lane group at a time (quant_lane.cuh), dp4a dot products. Two launches
// after the routing: gate/up, a block per (pair, 32 hidden units), a warp per kUnits of them (their
// gate and up rows), x quantized by each block into shared memory while the rows load, the block's
// 32 activations quantized as one group into scratch.gate_up; down, a warp per (token, output row)
// over the token's k choices (their rows issued before the wait for gate/up: the route is
// complete when down starts), the (row, group) items of a warp's rows spread over all 32 lanes,
// the token's int8 activations copied into shared memory, weighted and summed with the down
// biases, straight into `out`: no atomics, deterministic. Where a block's whole rows fit, the
// run-staged launches of moe_decode_runs.cu replace these (MoeQuantStaging::Runs, the default).
#include "backend/cuda/moe_decode_quant.cuh"

namespace akv::cuda {
namespace {

using namespace moe_quant;

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
  quantize_x(x + token * x_stride, groups, x_vec, xc, xs);
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
  float gate[kUnits], up[kUnits];
  std::int64_t gate_row[kUnits], up_row[kUnits];
#pragma unroll
  for (int u = 0; u < kUnits; ++u) {
    gate[u] = part[2 * u], up[u] = part[2 * u + 1];
    gate_row[u] = rows[2 * u], up_row[u] = rows[2 * u + 1];
  }
  store_activations(gate, up, gate_row, up_row, bias, bias_dtype, m, a, aq, unit_act);
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
  const int t = static_cast<int>(blockIdx.y);
  down_route(route, route_stride, t, m.top_k, experts, weights);  // before gate/up is done
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
  pdl_wait();               // gate/up's activations
  down_activations(aq, t, codes, scales, ac, as);
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
                             const MoeScratch& scratch, TensorRef out, Stream s, int sm_count,
                             MoeQuantStaging staging) {
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
                     s,
                     sm_count};
  const bool runs = staging == MoeQuantStaging::Runs;
  if (!(runs && launch_gate_up_runs(a))) {
    if (w.format == ExpertFormat::Mxfp4)
      launch_gate_up<SplitMxfp4Rows>(a, mxfp4_rows(w.gate_up, w.gate_up_scales));
    else
      dispatch_quant(ggml_type(w.gate_up.dtype),
                     [&]<GgmlType T>() { launch_gate_up<GgufRows<T>>(a, gguf_rows(w.gate_up)); });
  }
  if (!(runs && launch_down_runs(a))) {
    if (w.format == ExpertFormat::Mxfp4)
      launch_down<SplitMxfp4Rows>(a, mxfp4_rows(w.down, w.down_scales));
    else
      dispatch_quant(ggml_type(w.down.dtype),
                     [&]<GgmlType T>() { launch_down<GgufRows<T>>(a, gguf_rows(w.down)); });
  }
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
