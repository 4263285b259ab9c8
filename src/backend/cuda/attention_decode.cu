// Paged attention for decode tokens on the tensor cores (mma.sync m16n8k16), for BF16 KV, head_dim
// 64 or 128 and up to 16 query heads per block. The grid and the split-K contract are those of
// attention.cu (token, head group, split; token_keys decides on the device how many splits a
// token uses; its merge_kernel combines them): one block = the query heads of one decode token
// that share a KV head, over one split of its keys. Those heads are the rows of one m16 tile, so
// a K/V tile staged in shared memory is read once for the whole group. q enters as bf16 hi + lo
// halves and P likewise, so every score and output stays within ~1e-5 of the f32 kernel (the
// tensor cores do twice the work; decode attention is bound by reading K and V).
#include <cmath>

#include "backend/cuda/attention_split.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kv_tile.cuh"
#include "backend/cuda/mma_util.cuh"

namespace akv::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kKeys = 16 * kWarps;  // keys per tile: 16 per warp
constexpr int kStages = 2;
constexpr int kPad = 8;  // bf16 elements of row padding: conflict-free ldmatrix

using bf16 = __nv_bfloat16;

template <int D>
constexpr int smem_bytes() {
  return (2 * kStages * kKeys) * (D + kPad) * static_cast<int>(sizeof(bf16));
}

// Lane (g, c) = (lane / 4, lane % 4) holds accumulator rows g (heads) and g + 8 (zero padding
// when kG <= 8), columns 2c, 2c + 1 of each n8 tile.
template <int D, int kG>
__global__ void __launch_bounds__(kThreads)
    attention_decode_kernel(KvView kv, DeviceBatch b, AttentionArgs a, SplitArgs sa) {
  static_assert(kG <= 16, "one m16 tile of query heads");
  pdl_trigger();
  pdl_wait();
  constexpr int LD = D + kPad;
  constexpr int kChunks = D / 8;
  constexpr int kRowsPerPass = kThreads / kChunks;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* Ks = reinterpret_cast<bf16*>(smem);  // [kStages][kKeys][LD]
  bf16* Vs = Ks + kStages * kKeys * LD;

  const int t = blockIdx.x;
  const int h0 = blockIdx.y * kG;
  const int split = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  const int kvh = h0 / (a.n_heads / a.n_kv_heads);
  const std::int32_t* table = b.tables + b.seq_info[4 * b.token_seq[t] + 3];
  const TokenKeys keys = token_keys(b, a, sa.n_splits, t);
  if (split >= keys.splits) return;  // the whole block: this token needs fewer splits
  const auto [begin, end] = split_keys(keys, split);
  const int n_kt = (end - begin + kKeys - 1) / kKeys;

  const bf16* kc = static_cast<const bf16*>(kv.k) + std::int64_t{kvh} * D + (tid % kChunks) * 8;
  const bf16* vc = static_cast<const bf16*>(kv.v) + std::int64_t{kvh} * D + (tid % kChunks) * 8;
  auto load_kv = [&](int buf, int k0) {
    const int c8 = (tid % kChunks) * 8;
#pragma unroll
    for (int r = tid / kChunks; r < kKeys; r += kRowsPerPass) {
      const int p = k0 + r;
      bf16* kd = Ks + (buf * kKeys + r) * LD + c8;
      bf16* vd = Vs + (buf * kKeys + r) * LD + c8;
      gather_kv16(kd, vd, kc, vc, kv, table, p, p < end);
    }
  };
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_kt) load_kv(s, begin + s * kKeys);
    cp_async_commit();
  }

  // q * scale as hi + lo A fragments (rows >= kG zero): a0 (g, 2c), a1 (g + 8, 2c),
  // a2 (g, 2c + 8), a3 (g + 8, 2c + 8) of each k16 step.
  std::uint32_t qh[D / 16][4], ql[D / 16][4];
  {
    const float* qrow = sa.q + t * sa.q_stride + std::int64_t{h0 + g} * D + 2 * c;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // k 2c.. and 2c + 8..
        float2 v = make_float2(0.0f, 0.0f);
        if (g < kG) v = *reinterpret_cast<const float2*>(qrow + ks * 16 + 8 * half);
        split_bf16(v.x * a.scale, v.y * a.scale, qh[ks][2 * half], ql[ks][2 * half]);
        qh[ks][2 * half + 1] = ql[ks][2 * half + 1] = 0;  // row g + 8: padding
      }
    }
  }

  float o[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m_run = -INFINITY, l_run = 0.0f;  // row g

  for (int it = 0; it < n_kt; ++it) {
    const int k0 = begin + it * kKeys;
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (it + kStages - 1 < n_kt) load_kv((it + kStages - 1) % kStages, k0 + (kStages - 1) * kKeys);
    cp_async_commit();
    const bf16* Kt = Ks + ((it % kStages) * kKeys + 16 * warp) * LD;  // this warp's 16 keys
    const bf16* Vt = Vs + ((it % kStages) * kKeys + 16 * warp) * LD;

    // S[16 x 16]: two n8 tiles of keys. One ldmatrix.x4 gives both tiles' B fragments of a k-step.
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    const bf16* krow = Kt + ((lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      std::uint32_t r0, r1, r2, r3;
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                   : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                   : "r"(smem_addr(krow + ks * 16)));
      mma_bf16(s[0], qh[ks], r0, r1);
      mma_bf16(s[0], ql[ks], r0, r1);
      mma_bf16(s[1], qh[ks], r2, r3);
      mma_bf16(s[1], ql[ks], r2, r3);
    }

    // Row g's scores: s[nt][0..1] at keys k0 + 16 warp + 8 nt + 2c (+1). Rows g + 8 are padding.
    float mx = m_run;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float x = s[nt][e];
        if (a.softcap > 0.0f) x = a.softcap * tanhf(x / a.softcap);
        const int key = k0 + 16 * warp + 8 * nt + 2 * c + e;
        x = key < end ? x * kLog2e : -INFINITY;
        s[nt][e] = x;
        mx = fmaxf(mx, x);
      }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float base = mx == -INFINITY ? 0.0f : mx;
    const float corr = fast_exp2(m_run - base);
    m_run = mx;
    float rs = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[nt][e] = fast_exp2(s[nt][e] - base);
        rs += s[nt][e];
      }
    l_run = l_run * corr + rs;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      o[dt][0] *= corr;
      o[dt][1] *= corr;
    }

    // O += P V over this warp's 16 keys, P as hi + lo A fragments (rows g + 8 zero).
    std::uint32_t ph[4], pl[4];
    split_bf16(s[0][0], s[0][1], ph[0], pl[0]);
    split_bf16(s[1][0], s[1][1], ph[2], pl[2]);
    ph[1] = ph[3] = pl[1] = pl[3] = 0;
    const bf16* vrow = Vt + (lane & 15) * LD + (lane >> 4) * 8;
#pragma unroll
    for (int dt = 0; dt < D / 8; dt += 2) {
      std::uint32_t r0, r1, r2, r3;
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                   : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                   : "r"(smem_addr(vrow + dt * 8)));
      mma_bf16(o[dt], ph, r0, r1);
      mma_bf16(o[dt], pl, r0, r1);
      mma_bf16(o[dt + 1], ph, r2, r3);
      mma_bf16(o[dt + 1], pl, r2, r3);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the K/V buffers become the merge area

  // Merge the warps' (max, sum, acc) of row g: [kWarps][kG] max and sum, [kWarps][kG][D] acc.
  float* sm_m = reinterpret_cast<float*>(smem);
  float* sm_l = sm_m + kWarps * kG;
  float* sm_acc = sm_l + kWarps * kG;
  l_run += __shfl_xor_sync(0xffffffffu, l_run, 1);
  l_run += __shfl_xor_sync(0xffffffffu, l_run, 2);
  if (g < kG) {
    if (c == 0) {
      sm_m[warp * kG + g] = m_run;
      sm_l[warp * kG + g] = l_run;
    }
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<float2*>(sm_acc + (warp * kG + g) * D + dt * 8 + 2 * c) = make_float2(o[dt][0], o[dt][1]);
  }
  __syncthreads();
  for (int i = tid; i < kG * D; i += kThreads) {
    const int h = i / D, d = i % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, sm_m[w * kG + h]);
    float sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float f = sm_m[w * kG + h] == -INFINITY ? 0.0f : fast_exp2(sm_m[w * kG + h] - mx);
      sum += sm_l[w * kG + h] * f;
      acc += sm_acc[(w * kG + h) * D + d] * f;
    }
    if (sa.n_splits == 1) {
      sa.out[t * sa.out_stride + std::int64_t{h0 + h} * D + d] = acc / sum;
    } else {  // merge_kernel's layout; its max is in natural-log units
      float* p = sa.partial + ((std::int64_t{t} * a.n_heads + h0 + h) * sa.n_splits + split) * (D + 2);
      p[2 + d] = acc;
      if (d == 0) {
        p[0] = mx / kLog2e;
        p[1] = sum;
      }
    }
  }
}

template <int D, int kG>
void launch_dg(const KvView& kv, const DeviceBatch& b, const AttentionArgs& a, const SplitArgs& sa, Stream s) {
  static_assert(smem_bytes<D>() >= static_cast<int>(sizeof(float)) * kWarps * kG * (D + 2), "merge area");
  static bool attribute_set = false;  // the engine thread is the only caller
  if (!attribute_set) {
    AKV_CUDA_CHECK(cudaFuncSetAttribute(attention_decode_kernel<D, kG>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        smem_bytes<D>()));
    attribute_set = true;
  }
  launch(attention_decode_kernel<D, kG>, dim3(b.n_tokens, a.n_heads / kG, sa.n_splits), kThreads, smem_bytes<D>(), s,
         kv, b, a, sa);
}

template <int D>
void launch_d(const KvView& kv, const DeviceBatch& b, const AttentionArgs& a, const SplitArgs& sa, int heads,
              Stream s) {
  switch (heads) {
    case 8: launch_dg<D, 8>(kv, b, a, sa, s); break;
    case 4: launch_dg<D, 4>(kv, b, a, sa, s); break;
    default: launch_dg<D, 2>(kv, b, a, sa, s); break;
  }
}

}  // namespace

bool decode_attention_mma_supported(const KvView& kv, const AttentionArgs& a, const SplitArgs& sa,
                                    int heads_per_block) {
  return kv.dtype == DType::BF16 && (a.head_dim == 64 || a.head_dim == 128) &&
         (heads_per_block == 2 || heads_per_block == 4 || heads_per_block == 8) && kv.row_width % 8 == 0 &&
         sa.q_stride % 2 == 0 && reinterpret_cast<std::uintptr_t>(sa.q) % 8 == 0;
}

void launch_attention_decode_mma(const KvView& kv, const DeviceBatch& b, const AttentionArgs& a, const SplitArgs& sa,
                                 int heads_per_block, Stream s) {
  if (a.head_dim == 64)
    launch_d<64>(kv, b, a, sa, heads_per_block, s);
  else
    launch_d<128>(kv, b, a, sa, heads_per_block, s);
  AKV_CUDA_CHECK_LAUNCH();
}

}  // namespace akv::cuda
