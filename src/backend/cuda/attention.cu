// CUDA-core paged attention for any KV dtype and head_dim <= 256: decode tokens and the
// general fallback (BF16 KV of head_dim 64/128 with GQA groups of 2, 4, 8 runs on the tensor
// cores instead: attention_decode.cu, same grid and split contract, and there several tokens of
// a short chunk per block). Grid (token, head group, split): a block takes the kG query heads that share
// one KV head, its 4 warps walk the split's keys through the block table with an online softmax,
// and the warps' states are merged in shared memory. With several splits (flash-decoding for
// long contexts) each block writes (max, sum, acc) and merge_kernel combines them. How many of the
// grid's splits a token uses follows from its own key count on the device (at least
// kMinSplitKeys keys a split), so one launch shape serves every context length (CUDA graphs).
// merge_kernel also combines the splits of the prefill kernels (attention_split.cuh).
#include <cmath>

#include "backend/cuda/attention_split.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"

namespace akv::cuda {
namespace {

constexpr int kWarps = 4;

// Adds a sink's softmax term exp(sink) (no value) to a head's final (max, sum, unnormalised
// output): both are moved to the larger of the two maxima first.
__device__ __forceinline__ void add_sink(float sink, float mx, float& sum, float& o) {
  const float m = fmaxf(mx, sink);
  const float c = __expf(mx - m);
  sum = sum * c + __expf(sink - m);
  o *= c;
}

// kE: head dims per lane (dims lane*kE .. lane*kE + kE - 1); kG: query heads per block.
template <typename T, int kE, int kG>
__global__ void __launch_bounds__(kWarps * 32)
    attention_split_kernel(KvView kv, DeviceBatch b, AttentionArgs a, SplitArgs sa) {
  pdl_trigger();
  pdl_wait();
  const int t = blockIdx.x;
  const int h0 = blockIdx.y * kG;
  const int split = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int D = a.head_dim;
  const int kvh = h0 / (a.n_heads / a.n_kv_heads);
  const std::int32_t* table = b.tables + b.seq_info[4 * b.token_seq[t] + 3];
  const TokenKeys keys = group_keys(b, a, sa, t);
  if (split >= keys.splits) return;  // the whole block: this token needs fewer splits
  const auto [begin, end] = split_keys(keys, split);
  const int d0 = lane * kE;

  float q[kG][kE];
#pragma unroll
  for (int g = 0; g < kG; ++g)
#pragma unroll
    for (int e = 0; e < kE; ++e)
      q[g][e] = d0 + e < D ? sa.q[t * sa.q_stride + std::int64_t{h0 + g} * D + d0 + e] * a.scale : 0.0f;

  float m[kG], l[kG], acc[kG][kE];
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < kE; ++e) acc[g][e] = 0.0f;
  }
  const T* kc = static_cast<const T*>(kv.k);
  const T* vc = static_cast<const T*>(kv.v);
  // kKeys keys per warp and step, their loads issued before any use (latency, not bandwidth, is
  // what bounds a decode step's short walks).
  constexpr int kKeys = 4;
  for (int j0 = begin + warp * kKeys; j0 < end; j0 += kWarps * kKeys) {
    float kf[kKeys][kE], vf[kKeys][kE];
#pragma unroll
    for (int u = 0; u < kKeys; ++u) {
      const int j = min(j0 + u, end - 1);
      const std::int64_t row = std::int64_t{table[j / kv.block_size]} * kv.block_size + j % kv.block_size;
      const std::int64_t off = row * kv.row_width + std::int64_t{kvh} * D + d0;
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        kf[u][e] = d0 + e < D ? to_f32(kc[off + e]) : 0.0f;
        vf[u][e] = d0 + e < D ? to_f32(vc[off + e]) : 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kKeys; ++u) {
      if (j0 + u >= end) break;
#pragma unroll
      for (int g = 0; g < kG; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < kE; ++e) dot += q[g][e] * kf[u][e];
        float s = warp_sum(dot);
        if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
        const float m_new = fmaxf(m[g], s);
        const float corr = __expf(m[g] - m_new);  // exp(-inf) = 0 on the first key
        const float p = __expf(s - m_new);
        l[g] = l[g] * corr + p;
#pragma unroll
        for (int e = 0; e < kE; ++e) acc[g][e] = acc[g][e] * corr + p * vf[u][e];
        m[g] = m_new;
      }
    }
  }

  // Merge the warps: [kWarps][kG] max and sum, [kWarps][kG][32 * kE] acc.
  __shared__ float sm_m[kWarps][kG], sm_l[kWarps][kG];
  __shared__ float sm_acc[kWarps][kG][32 * kE];
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    if (lane == 0) {
      sm_m[warp][g] = m[g];
      sm_l[warp][g] = l[g];
    }
#pragma unroll
    for (int e = 0; e < kE; ++e) sm_acc[warp][g][d0 + e] = acc[g][e];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kG * D; i += kWarps * 32) {
    const int g = i / D, d = i % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, sm_m[w][g]);
    float sum = 0.0f, o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float f = sm_m[w][g] == -INFINITY ? 0.0f : __expf(sm_m[w][g] - mx);
      sum += sm_l[w][g] * f;
      o += sm_acc[w][g][d] * f;
    }
    const int h = h0 + g;
    if (sa.n_splits == 1) {
      if (a.sinks != nullptr) add_sink(a.sinks[h], mx, sum, o);
      sa.out[t * sa.out_stride + std::int64_t{h} * D + d] = o / sum;
    } else {
      float* p = sa.partial + ((std::int64_t{t} * a.n_heads + h) * sa.n_splits + split) * (D + 2);
      p[2 + d] = o;
      if (d == 0) {
        p[0] = mx;
        p[1] = sum;
      }
    }
  }
}

__global__ void merge_kernel(DeviceBatch b, AttentionArgs a, SplitArgs sa) {
  pdl_trigger();
  pdl_wait();
  const int t = blockIdx.x, h = blockIdx.y, D = a.head_dim;
  const int n_used = group_keys(b, a, sa, t).splits;
  const float* p = sa.partial + (std::int64_t{t} * a.n_heads + h) * sa.n_splits * (D + 2);
  float mx = -INFINITY;
  for (int s = 0; s < n_used; ++s) mx = fmaxf(mx, p[s * (D + 2)]);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float sum = 0.0f, o = 0.0f;
    for (int s = 0; s < n_used; ++s) {
      const float* ps = p + s * (D + 2);
      if (ps[0] == -INFINITY) continue;  // no key of this token in the split
      const float f = __expf(ps[0] - mx);
      sum += ps[1] * f;
      o += ps[2 + d] * f;
    }
    if (a.sinks != nullptr) add_sink(a.sinks[h], mx, sum, o);
    sa.out[t * sa.out_stride + std::int64_t{h} * D + d] = o / sum;
  }
}

int heads_per_block(int group) { return group % 8 == 0 ? 8 : group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1; }

template <typename T, int kE>
void launch_e(const KvView& kv, const DeviceBatch& b, const AttentionArgs& a, const SplitArgs& sa, int group,
              Stream s) {
  const int g = heads_per_block(group);
  const dim3 grid(b.n_tokens, a.n_heads / g, sa.n_splits);
  switch (g) {
    case 8: launch(attention_split_kernel<T, kE, 8>, grid, kWarps * 32, 0, s, kv, b, a, sa); break;
    case 4: launch(attention_split_kernel<T, kE, 4>, grid, kWarps * 32, 0, s, kv, b, a, sa); break;
    case 2: launch(attention_split_kernel<T, kE, 2>, grid, kWarps * 32, 0, s, kv, b, a, sa); break;
    default: launch(attention_split_kernel<T, kE, 1>, grid, kWarps * 32, 0, s, kv, b, a, sa); break;
  }
}

}  // namespace

void launch_attention_merge(const DeviceBatch& b, const AttentionArgs& a, const SplitArgs& sa, Stream s) {
  launch(merge_kernel, dim3(b.n_tokens, a.n_heads), 128, 0, s, b, a, sa);
  AKV_CUDA_CHECK_LAUNCH();
}

int attention_split_group_tokens(TensorRef q, const KvView& kv, const AttentionArgs& a) {
  const int heads = heads_per_block(a.n_heads / a.n_kv_heads);
  const SplitArgs sa{static_cast<const float*>(q.data), q.stride, nullptr, 0, nullptr, 1};
  return decode_attention_mma_supported(kv, a, sa, heads) ? 16 / heads : 1;
}

void launch_attention_split(TensorRef q, const KvView& kv, const DeviceBatch& b, const AttentionArgs& a,
                            int n_splits, int group_tokens, float* partial, TensorRef out, Stream s) {
  AKV_CHECK(a.head_dim <= 256 && a.n_heads % a.n_kv_heads == 0, "attention: head_dim <= 256, whole groups");
  AKV_CHECK(n_splits >= 1 && (n_splits == 1 || partial != nullptr), "attention: splits");
  AKV_CHECK(group_tokens == 1 || group_tokens == attention_split_group_tokens(q, kv, a),
            "attention: token groups only on the tensor-core kernel");
  if (b.n_tokens == 0) return;
  const SplitArgs sa{static_cast<const float*>(q.data), q.stride, static_cast<float*>(out.data), out.stride,
                     partial, n_splits, group_tokens, 1};
  const int group = a.n_heads / a.n_kv_heads;
  if (decode_attention_mma_supported(kv, a, sa, heads_per_block(group))) {
    launch_attention_decode_mma(kv, b, a, sa, heads_per_block(group), s);
  } else {
    dispatch_float(kv.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (a.head_dim <= 32)
      launch_e<T, 1>(kv, b, a, sa, group, s);
    else if (a.head_dim <= 64)
      launch_e<T, 2>(kv, b, a, sa, group, s);
    else if (a.head_dim <= 128)
      launch_e<T, 4>(kv, b, a, sa, group, s);
    else
      launch_e<T, 8>(kv, b, a, sa, group, s);
    });
    AKV_CUDA_CHECK_LAUNCH();
  }
  if (n_splits > 1) launch_attention_merge(b, a, sa, s);
}

}  // namespace akv::cuda
