// The first CUDA MoE, written for correctness first and kept as the on-device baseline and the
// fallback for shapes the fast kernels do not take (moe_kernels.h): one thread routes a token,
// then one warp per output row of each (token, choice) pair reads the chosen expert's rows (each
// pair re-reads them), then the weighted sum per token. Expert weights F32, BF16, F16 or MXFP4.
#include <cmath>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/moe_device.cuh"
#include "backend/cuda/moe_kernels.h"

namespace akv::cuda {
namespace {

struct Mxfp4 {};  // tag: the rows are MXFP4 blocks + E8M0 scales

// Element c of row `row` of a stacked expert matrix of width `cols`.
template <typename T>
__device__ __forceinline__ float weight_at(const void* w, const std::uint8_t*, std::int64_t row,
                                           int cols, int c) {
  return to_f32(static_cast<const T*>(w)[row * cols + c]);
}
template <>
__device__ __forceinline__ float weight_at<Mxfp4>(const void* w, const std::uint8_t* scales,
                                                  std::int64_t row, int cols, int c) {
  constexpr float kE2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  const std::uint8_t byte = static_cast<const std::uint8_t*>(w)[row * (cols / 2) + c / 2];
  const std::uint8_t e = scales[row * (cols / 32) + c / 32];
  const float scale = e == 255 ? __int_as_float(0x7fc00000) : ldexpf(1.0f, int(e) - 127);
  return kE2m1[(c & 1) ? byte >> 4 : byte & 0x0f] * scale;
}

// route[t] = k expert ids (as floats), then k weights: route_experts (moe.h) per token.
__global__ void route_kernel(const float* logits, std::int64_t logits_stride, float* route,
                             std::int64_t route_stride, int n, DeviceMoe m) {
  pdl_trigger();
  pdl_wait();
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  const float* l = logits + t * logits_stride;
  float* r = route + t * route_stride;
  constexpr int kMaxK = 32;
  int ids[kMaxK];
  for (int i = 0; i < m.top_k; ++i) {
    int best = -1;
    for (int e = 0; e < m.n_experts; ++e) {
      bool taken = false;
      for (int j = 0; j < i; ++j) taken |= ids[j] == e;
      if (!taken && (best < 0 || l[e] > l[best])) best = e;
    }
    ids[i] = best;
  }
  const float top = l[ids[0]];
  float chosen = 0.0f;
  for (int i = 0; i < m.top_k; ++i) chosen += expf(l[ids[i]] - top);
  float denom = chosen;
  if (m.gating == static_cast<int>(MoeGating::SoftmaxTopK) && !m.norm_topk_prob) {
    denom = 0.0f;
    for (int e = 0; e < m.n_experts; ++e) denom += expf(l[e] - top);
  }
  for (int i = 0; i < m.top_k; ++i) {
    r[i] = static_cast<float>(ids[i]);
    r[m.top_k + i] = expf(l[ids[i]] - top) / denom;
  }
}

// out[a, r] = in[a, :] . w[expert(a) * rows + r, :] + bias[expert(a), r] for pair a = blockIdx.x
// and rows r of this block's warps; `in` row of pair a is in_row(a).
template <typename T>
__global__ void expert_rows_kernel(const float* in, std::int64_t in_stride, bool in_per_token,
                                   const void* w, const std::uint8_t* scales, const void* bias,
                                   DType bias_dtype, int rows, int cols, const float* route,
                                   std::int64_t route_stride, float* out, std::int64_t out_stride,
                                   DeviceMoe m) {
  pdl_trigger();
  pdl_wait();
  const int a = blockIdx.x;
  const int token = a / m.top_k, choice = a % m.top_k;
  const int expert = static_cast<int>(route[token * route_stride + choice]);
  const int lane = threadIdx.x % 32;
  const int r = blockIdx.y * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= rows) return;
  const float* x = in + (in_per_token ? token : a) * in_stride;
  const std::int64_t row = std::int64_t{expert} * rows + r;
  float dot = 0.0f;
  for (int c = lane; c < cols; c += 32) dot += x[c] * weight_at<T>(w, scales, row, cols, c);
  dot = warp_sum(dot);
  if (lane == 0) out[a * out_stride + r] = dot + moe_bias_at(bias, bias_dtype, row);
}

__global__ void activation_kernel(const float* gate_up, std::int64_t gu_stride, float* act,
                                  std::int64_t act_stride, int n_pairs, DeviceMoe m) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= std::int64_t{n_pairs} * m.inter) return;
  const int a = static_cast<int>(i / m.inter), j = static_cast<int>(i % m.inter);
  const float* h = gate_up + a * gu_stride;
  const float g = m.interleaved ? h[2 * j] : h[j];
  const float u = m.interleaved ? h[2 * j + 1] : h[m.inter + j];
  act[a * act_stride + j] = moe_activation(g, u, m);
}

__global__ void combine_kernel(const float* down, std::int64_t down_stride, const float* route,
                               std::int64_t route_stride, float* out, std::int64_t out_stride,
                               int n, DeviceMoe m) {
  pdl_trigger();
  pdl_wait();
  const std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= std::int64_t{n} * m.hidden) return;
  const int t = static_cast<int>(i / m.hidden), c = static_cast<int>(i % m.hidden);
  float y = 0.0f;
  for (int k = 0; k < m.top_k; ++k)
    y += route[t * route_stride + m.top_k + k] *
         down[(std::int64_t{t} * m.top_k + k) * down_stride + c];
  out[t * out_stride + c] = y;
}

template <typename T>
void launch_experts(TensorRef x, const MoeWeights& w, const DeviceMoe& m, const MoeScratch& s,
                    int n, Stream st) {
  constexpr int kWarpsPerBlock = 8;
  const int pairs = n * m.top_k;
  const float* route = static_cast<const float*>(s.route.data);
  const auto* gu_scales = static_cast<const std::uint8_t*>(w.gate_up_scales.data);
  const auto* dn_scales = static_cast<const std::uint8_t*>(w.down_scales.data);
  launch(expert_rows_kernel<T>, dim3(pairs, blocks_for(2 * m.inter, kWarpsPerBlock)),
         kWarpsPerBlock * 32, 0, st, static_cast<const float*>(x.data), x.stride, true,
         w.gate_up.data, gu_scales, w.gate_up_bias.data, w.gate_up_bias.dtype, 2 * m.inter,
         m.hidden, route, s.route.stride, static_cast<float*>(s.gate_up.data), s.gate_up.stride, m);
  launch(activation_kernel, dim3(blocks_for(std::int64_t{pairs} * m.inter, 256)), 256, 0, st,
         static_cast<const float*>(s.gate_up.data), s.gate_up.stride,
         static_cast<float*>(s.act.data), s.act.stride, pairs, m);
  launch(expert_rows_kernel<T>, dim3(pairs, blocks_for(m.hidden, kWarpsPerBlock)),
         kWarpsPerBlock * 32, 0, st, static_cast<const float*>(s.act.data), s.act.stride, false,
         w.down.data, dn_scales, w.down_bias.data, w.down_bias.dtype, m.hidden, m.inter, route,
         s.route.stride, static_cast<float*>(s.down.data), s.down.stride, m);
}

}  // namespace

void launch_moe_per_pair(TensorRef x, TensorRef router_logits, const MoeWeights& w, const MoeParams& p,
                         const MoeScratch& scratch, TensorRef out, Stream s) {
  AKV_CHECK(p.top_k <= 32, "moe: at most 32 experts per token on the CUDA backend");
  const int n = static_cast<int>(x.rows);
  const DeviceMoe m = device_moe(p, x.cols);
  launch(route_kernel, dim3(blocks_for(n, 128)), 128, 0, s,
         static_cast<const float*>(router_logits.data), router_logits.stride,
         static_cast<float*>(scratch.route.data), scratch.route.stride, n, m);
  if (w.format == ExpertFormat::Mxfp4) {
    launch_experts<Mxfp4>(x, w, m, scratch, n, s);
  } else {
    AKV_CHECK(w.gate_up.dtype == w.down.dtype, "moe: gate_up and down of one dtype");
    dispatch_float(w.gate_up.dtype,
                   [&](auto tag) { launch_experts<decltype(tag)>(x, w, m, scratch, n, s); });
  }
  launch(combine_kernel, dim3(blocks_for(std::int64_t{n} * m.hidden, 256)), 256, 0, s,
         static_cast<const float*>(scratch.down.data), scratch.down.stride,
         static_cast<const float*>(scratch.route.data), scratch.route.stride,
         static_cast<float*>(out.data), out.stride, n, m);
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
