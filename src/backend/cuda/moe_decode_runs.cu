// The int8 decode of quantized experts with each warp's rows staged whole (moe_decode_quant.cuh:
// launch_gate_up_runs, launch_down_runs). The rows a warp reads are consecutive in the expert
// stack, so they come in as a few contiguous copies (16-byte cp.async) instead of a copy per row
// and window: the per-row address arithmetic and loop of the windowed kernels was a third to a
// half of their instructions at batch 1, and their second window's copy waited for the first's
// sums. Gate/up: the warp's rows are runs through a ring of two slots (two runs of 4 rows both in
// flight where the grid fits one wave at two blocks a multiprocessor, else four runs of 2 rows in
// about half the shared memory: three blocks a multiprocessor); the results equal the windowed
// kernel's bit for bit (same per-lane order of every sum). Down: a block per (token, 8 or 4 output
// rows), a warp per choice of the token staging that expert's rows as one run; the choices' dot
// products meet in shared memory and are weighted and summed in choice order (deterministic, no
// atomics).
#include "backend/cuda/moe_decode_quant.cuh"

namespace akv::cuda::moe_quant {
namespace {

// Sums of a run's n rows (kRows at most) over all groups against the int8 codes xc / scales xs:
// part[i] += this lane's groups g = lane, lane + 32, ... of row i (the windowed kernels' order).
template <class F, int kRows>
__device__ __forceinline__ void run_sums(const std::uint8_t* run, int off, int row_bytes,
                                         int scale_bytes, int n, int groups, const std::int8_t* xc,
                                         const float2* xs, int lane, float (&part)[kRows]) {
  for (int g = lane; g < groups; g += 32) {
    const int4* c = reinterpret_cast<const int4*>(xc + g * kQuantGroup);
    const int4 ca = c[0], cb = c[1];
    const float2 ds = xs[g];
#pragma unroll
    for (int i = 0; i < kRows; ++i)
      if (i < n)
        part[i] += group_dot(F::decode_run(run, off, row_bytes, scale_bytes, i, g), ca, cb, ds);
  }
}

// The same sums over all 32 lanes whatever the width: items (row i, group g), i * groups + g =
// lane, lane + 32, ... (the windowed down kernel's spread; rows narrower than 32 groups leave no
// lane idle), each added to its row's sum.
template <class F, int kRows>
__device__ __forceinline__ void run_sums_spread(const std::uint8_t* run, int off, int row_bytes,
                                                int scale_bytes, int n, int groups,
                                                const std::int8_t* xc, const float2* xs, int lane,
                                                float (&part)[kRows]) {
  int i = lane / groups, g = lane - i * groups;
  for (int item = lane; item < n * groups; item += 32) {
    const float v = group_dot(F::decode_run(run, off, row_bytes, scale_bytes, i, g),
                              xc + g * kQuantGroup, xs[g]);
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      if (r == i) part[r] += v;
    for (g += 32; g >= groups; g -= groups) ++i;
  }
}

// gate_up_kernel's work and results (moe_decode_quant.cu) with the warp's 2 kUnits rows as
// kRuns = 2 kUnits / kRunRows runs of kRunRows consecutive rows: the gate rows j0 .. j0 + 3 then
// the up rows inter + j0 .. (split gate/up), or rows 2 j0 .. 2 j0 + 7 (interleaved), in order.
// The runs go through a ring of kSlots slots a warp: run r + kSlots is copied into run r's slot
// once r's sums are done, so kSlots runs are in flight while one is summed. Dynamic shared memory:
// x's codes and scales (codes_bytes(hidden)), then kSlots slots of slot_bytes per warp.
template <class F, int kRunRows, int kSlots>
__global__ void __launch_bounds__(kGateUpWarps * 32, kSlots* kRunRows <= kUnits ? 3 : 2)
    gate_up_runs_kernel(const float* __restrict__ x, std::int64_t x_stride, ExpertRows w,
                        const float* __restrict__ route, std::int64_t route_stride,
                        const void* bias, DType bias_dtype, QuantActivations aq, DeviceMoe m,
                        int slot_bytes, bool x_vec) {
  constexpr int kRuns = 2 * kUnits / kRunRows, kHalf = kRuns / 2;  // runs a warp, a half's
  static_assert(kRuns % 2 == 0 && kSlots <= kRuns, "each half (gate, up) is whole runs");
  extern __shared__ __align__(16) std::uint8_t smem[];
  __shared__ float unit_act[kQuantGroup];
  pdl_wait();
  pdl_trigger();  // after the wait: the down launch reads the route before its own wait
  const int a = static_cast<int>(blockIdx.y), token = a / m.top_k, choice = a % m.top_k;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int j0 = static_cast<int>(blockIdx.x) * kQuantGroup + warp * kUnits;
  const int groups = m.hidden / kQuantGroup;
  auto* xc = reinterpret_cast<std::int8_t*>(smem);
  auto* xs = reinterpret_cast<float2*>(smem + m.hidden);
  std::uint8_t* slots = smem + codes_bytes(m.hidden) + std::int64_t{warp} * kSlots * slot_bytes;
  const std::int64_t base =
      std::int64_t{static_cast<int>(route[token * route_stride + choice])} * 2 * m.inter;
  // Run r: rows first(r) .. first(r) + kRunRows - 1, i.e. rows (r % kHalf) kRunRows .. of half
  // r / kHalf (part[r / kHalf] below).
  auto first = [&](int r) {
    const int within = (r % kHalf) * kRunRows;
    return m.interleaved ? base + 2 * j0 + r * kRunRows
                         : base + (r / kHalf) * std::int64_t{m.inter} + j0 + within;
  };
  int off[kRuns];
  // One commit group a run (empty past the last), so "all but the newest kSlots - 1 groups"
  // always means run r is in.
  auto issue = [&](int r) {
    if (r < kRuns)
      off[r] = F::stage_run(w, first(r), kRunRows, slots + (r % kSlots) * slot_bytes, lane);
    cp_async_commit();
  };
#pragma unroll
  for (int r = 0; r < kSlots; ++r) issue(r);
  quantize_x(x + token * x_stride, groups, x_vec, xc, xs);  // while the runs load
  __syncthreads();
  const int rb = static_cast<int>(w.row_bytes), sb = static_cast<int>(w.scale_bytes);
  float part[2][kUnits] = {};
#pragma unroll
  for (int r = 0; r < kRuns; ++r) {
    cp_async_wait<kSlots - 1>();
    __syncwarp();
    float sums[kRunRows] = {};
    run_sums<F, kRunRows>(slots + (r % kSlots) * slot_bytes, off[r], rb, sb, kRunRows, groups, xc,
                          xs, lane, sums);
#pragma unroll
    for (int i = 0; i < kRunRows; ++i) part[r / kHalf][(r % kHalf) * kRunRows + i] = sums[i];
    if (r + kSlots < kRuns) __syncwarp();  // every lane is done with run r's slot
    issue(r + kSlots);
  }
  float gate[kUnits], up[kUnits];
  std::int64_t gate_row[kUnits], up_row[kUnits];
#pragma unroll
  for (int u = 0; u < kUnits; ++u) {
    gate[u] = m.interleaved ? part[u / 2][2 * (u % 2)] : part[0][u];
    up[u] = m.interleaved ? part[u / 2][2 * (u % 2) + 1] : part[1][u];
    gate_row[u] = m.interleaved ? base + 2 * (j0 + u) : base + j0 + u;
    up_row[u] = m.interleaved ? gate_row[u] + 1 : base + m.inter + j0 + u;
  }
  store_activations(gate, up, gate_row, up_row, bias, bias_dtype, m, a, aq, unit_act);
}

// out[t, r0 .. r0 + kRows - 1] (t = blockIdx.y, r0 = kRows blockIdx.x) = sum over the token's
// choices i, in order, of weight_i * (down rows of expert_i . its activations) + sum of
// weight_i * down bias. Warp w takes choices w, w + warps, ...: each a run of the expert's kRows
// rows, the first issued before the wait for gate/up (the route is complete when down starts).
// Dynamic shared memory: the token's k activation rows' codes and scales
// (codes_bytes(top_k * inter)), then a run of run_bytes per warp.
template <class F, int kRows>
__global__ void __launch_bounds__(kDownWarps * 32)
    down_runs_kernel(QuantActivations aq, ExpertRows w, const float* __restrict__ route,
                     std::int64_t route_stride, const void* bias, DType bias_dtype,
                     float* __restrict__ out, std::int64_t out_stride, DeviceMoe m, int run_bytes) {
  extern __shared__ __align__(16) std::uint8_t smem[];
  __shared__ int experts[32];
  __shared__ float weights[32];
  __shared__ float sums[32][kRows];  // [choice][row]: unweighted dots
  pdl_trigger();
  const int t = static_cast<int>(blockIdx.y);
  down_route(route, route_stride, t, m.top_k, experts, weights);  // before gate/up is done
  const int warps = static_cast<int>(blockDim.x / 32);
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int r0 = static_cast<int>(blockIdx.x) * kRows;
  const int nr = min(kRows, m.hidden - r0);
  const int groups = m.inter / kQuantGroup;
  const int codes = m.top_k * m.inter, scales = m.top_k * groups;  // the token's
  auto* ac = reinterpret_cast<std::int8_t*>(smem);
  auto* as = reinterpret_cast<float2*>(smem + codes);
  std::uint8_t* run = smem + codes_bytes(codes) + std::int64_t{warp} * run_bytes;
  auto stage = [&](int i) {
    return F::stage_run(w, std::int64_t{experts[i]} * m.hidden + r0, nr, run, lane);
  };
  int off = stage(warp);  // in flight while gate/up finishes (warps <= top_k: down_runs)
  pdl_wait();             // gate/up's activations
  down_activations(aq, t, codes, scales, ac, as);
  const int rb = static_cast<int>(w.row_bytes), sb = static_cast<int>(w.scale_bytes);
  for (int i = warp; i < m.top_k; i += warps) {
    if (i != warp) {
      __syncwarp();  // every lane is done with the previous run
      off = stage(i);
    }
    cp_async_wait_all();
    __syncwarp();
    float part[kRows] = {};
    if (groups < 32)  // narrow experts (Qwen3-30B-A3B's 24 groups): no idle lanes
      run_sums_spread<F, kRows>(run, off, rb, sb, nr, groups, ac + i * m.inter, as + i * groups,
                                lane, part);
    else  // wide ones (GPT-OSS's 90): the plain walk, no per-item row select
      run_sums<F, kRows>(run, off, rb, sb, nr, groups, ac + i * m.inter, as + i * groups, lane,
                         part);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float v = warp_sum(part[r]);
      if (lane == 0) sums[i][r] = v;
    }
  }
  __syncthreads();
  const int r = static_cast<int>(threadIdx.x);
  if (r >= nr) return;
  float acc = 0.0f, biases = 0.0f;
  for (int i = 0; i < m.top_k; ++i) {
    acc += weights[i] * sums[i][r];
    if (bias != nullptr)
      biases +=
          weights[i] * moe_bias_at(bias, bias_dtype, std::int64_t{experts[i]} * m.hidden + r0 + r);
  }
  out[std::int64_t{t} * out_stride + r0 + r] = acc + biases;
}

template <class F, int kRunRows, int kSlots>
bool gate_up_runs_form(const DecodeArgs& a, const ExpertRows& rows) {
  static bool smem_set = false;  // one a format and form; the engine thread is the only caller
  const std::int64_t hidden = a.x.cols, pairs = a.x.rows * a.p.top_k;
  const std::int64_t slot = run_slot_bytes(rows, kRunRows);
  const auto smem = static_cast<std::size_t>(codes_bytes(hidden) + kGateUpWarps * kSlots * slot);
  if (smem > kRunsMaxSmemBytes) return false;
  const auto kernel = gate_up_runs_kernel<F, kRunRows, kSlots>;
  allow_smem(kernel, smem_set, smem);
  const bool x_vec = reinterpret_cast<std::uintptr_t>(a.x.data) % 16 == 0 && a.x.stride % 4 == 0;
  launch(kernel, dim3(static_cast<unsigned>(a.p.inter / kQuantGroup), static_cast<unsigned>(pairs)),
         dim3(kGateUpWarps * 32), smem, a.s, static_cast<const float*>(a.x.data), a.x.stride, rows,
         static_cast<const float*>(a.route.data), a.route.stride, a.w.gate_up_bias.data,
         a.w.gate_up_bias.dtype, a.aq, a.m, static_cast<int>(slot), x_vec);
  return true;
}

// Two slots a warp, both runs of 4 rows in flight at once, where the grid fits one wave at two
// blocks a multiprocessor and the block fits kRunsMaxSmemBytes. Else the ring of runs of 2 rows
// through two slots (about the shared memory of one run of 4, so three blocks a multiprocessor
// and no second wave for GPT-OSS-20B's 360 blocks a token; the runs after the first two are
// copied as slots free up). Measured at one token (H100, cuda_bench --moe 1): GPT-OSS-20B's layer
// 45.2 us with two slots, 40.0 with one slot of 4 rows (the second run copied after the first's
// sums), 39.2 with the ring.
template <class F>
bool gate_up_runs(const DecodeArgs& a, const ExpertRows& rows) {
  const std::int64_t blocks = a.p.inter / kQuantGroup * a.x.rows * a.p.top_k;
  return (blocks <= 2 * std::int64_t{a.sm_count} && gate_up_runs_form<F, kUnits, 2>(a, rows)) ||
         gate_up_runs_form<F, kUnits / 2, 2>(a, rows);
}

template <class F, int kRows>
bool down_runs_form(const DecodeArgs& a, const ExpertRows& rows) {
  static bool smem_set = false;
  const int warps = static_cast<int>(std::min<std::int64_t>(a.p.top_k, kDownWarps));
  const std::int64_t run = run_slot_bytes(rows, kRows);
  const auto smem = static_cast<std::size_t>(codes_bytes(a.p.top_k * a.p.inter) + warps * run);
  if (smem > kRunsMaxSmemBytes) return false;
  const auto kernel = down_runs_kernel<F, kRows>;
  allow_smem(kernel, smem_set, smem);
  launch(kernel, dim3(blocks_for(a.x.cols, kRows), static_cast<unsigned>(a.x.rows)),
         dim3(warps * 32), smem, a.s, a.aq, rows, static_cast<const float*>(a.route.data),
         a.route.stride, a.w.down_bias.data, a.w.down_bias.dtype, static_cast<float*>(a.out.data),
         a.out.stride, a.m, static_cast<int>(run));
  return true;
}

// Blocks of 8 rows, or of 4 where blocks of 8 would not make one wave at two blocks a
// multiprocessor (twice the blocks, each warp a run of half the bytes). Measured at one token
// (H100, cuda_bench --moe 1): the Qwen3-30B-A3B Q4_K_M layer (256 blocks of 8) 31.3 -> 26.6 us
// with 4 rows; GPT-OSS-20B's (360 blocks of 8) 40.0 -> 42.4 us and Qwen3's at 8 tokens 96.8 ->
// 99.2 us, so those keep 8.
template <class F>
bool down_runs(const DecodeArgs& a, const ExpertRows& rows) {
  const std::int64_t blocks = blocks_for(a.x.cols, 8) * a.x.rows;
  return blocks <= 2 * std::int64_t{a.sm_count} ? down_runs_form<F, 4>(a, rows)
                                                : down_runs_form<F, 8>(a, rows);
}

}  // namespace

bool launch_gate_up_runs(const DecodeArgs& a) {
  if (a.w.format == ExpertFormat::Mxfp4)
    return gate_up_runs<SplitMxfp4Rows>(a, mxfp4_rows(a.w.gate_up, a.w.gate_up_scales));
  bool done = false;
  dispatch_quant(ggml_type(a.w.gate_up.dtype), [&]<GgmlType T>() {
    done = gate_up_runs<GgufRows<T>>(a, gguf_rows(a.w.gate_up));
  });
  return done;
}

bool launch_down_runs(const DecodeArgs& a) {
  if (a.w.format == ExpertFormat::Mxfp4)
    return down_runs<SplitMxfp4Rows>(a, mxfp4_rows(a.w.down, a.w.down_scales));
  bool done = false;
  dispatch_quant(ggml_type(a.w.down.dtype),
                 [&]<GgmlType T>() { done = down_runs<GgufRows<T>>(a, gguf_rows(a.w.down)); });
  return done;
}

}  // namespace akv::cuda::moe_quant
