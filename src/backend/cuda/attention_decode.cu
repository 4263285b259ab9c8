// Paged attention for decode tokens and short chunks on the tensor cores (mma.sync m16n8k16), for
// BF16 KV, head_dim 64 or 128 and 2, 4 or 8 query heads per block. The grid and the split-K
// contract are those of attention.cu (token group, head group, split; group_keys decides on the
// device how many splits a group uses; its merge_kernel combines them): one block = the query
// heads that share a KV head, of one decode token or of 16 / heads consecutive tokens of a
// chunk, over one split of their keys. Those (token, head) pairs are the rows of one m16 tile, so
// a K/V tile staged in shared memory is read once for the whole group; each row masks the keys
// past its own position. q enters as bf16 hi + lo
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

// The block's query tokens: batch rows t0 .. t0 + n - 1 of one chunk, at positions pos0...
struct BlockTokens {
  int t0, n, pos0;
};
// kT == 1: token blockIdx.x. Else blockIdx.x = tile * groups_per_tile + j: tokens
// q0 + kT j .. of prefill tile `tile` (q0 its first chunk row); n == 0 past the chunk's end.
template <int kT>
__device__ __forceinline__ BlockTokens block_tokens(const DeviceBatch& b) {
  if constexpr (kT == 1) {
    const int t = blockIdx.x;
    const std::int32_t* info = b.seq_info + 4 * b.token_seq[t];
    return {t, 1, info[2] + t - info[0]};
  } else {
    const int groups_per_tile = static_cast<int>(gridDim.x) / b.n_tiles;
    const int tile = static_cast<int>(blockIdx.x) / groups_per_tile;
    const std::int32_t* info = b.seq_info + 4 * b.tiles[2 * tile];
    const int q0 = b.tiles[2 * tile + 1] + (static_cast<int>(blockIdx.x) % groups_per_tile) * kT;
    return {info[0] + q0, max(0, min(kT, info[1] - q0)), info[2] + q0};
  }
}

// Row r of the m16 tile is token r / kG, head r % kG of the block (kT * kG <= 16 rows). Lane
// (g, c) = (lane / 4, lane % 4) holds accumulator rows g and g + 8 (zero padding when
// kT * kG <= 8), columns 2c, 2c + 1 of each n8 tile. With kT > 1 each row masks the keys past
// its own position (and before its own window).
template <int D, int kG, int kT>
__global__ void __launch_bounds__(kThreads)
    attention_decode_kernel(KvView kv, DeviceBatch b, AttentionArgs a, SplitArgs sa) {
  constexpr int kR = kG * kT;  // rows in use
  static_assert(kR <= 16, "one m16 tile of query rows");
  constexpr bool kHigh = kR > 8;  // rows g + 8 in use
  pdl_trigger();
  pdl_wait();
  constexpr int LD = D + kPad;
  constexpr int kChunks = D / 8;
  constexpr int kRowsPerPass = kThreads / kChunks;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* Ks = reinterpret_cast<bf16*>(smem);  // [kStages][kKeys][LD]
  bf16* Vs = Ks + kStages * kKeys * LD;

  const BlockTokens bt = block_tokens<kT>(b);
  if (bt.n == 0) return;  // the whole block: past its chunk's end
  const int h0 = blockIdx.y * kG;
  const int split = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  const int kvh = h0 / (a.n_heads / a.n_kv_heads);
  const std::int32_t* table = b.tables + b.seq_info[4 * b.token_seq[bt.t0] + 3];
  const TokenKeys keys = group_keys(b, a, sa, bt.t0);
  if (split >= keys.splits) return;  // the whole block: this group needs fewer splits
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

  // This lane's rows g (hi = 0) and g + 8 (hi = 1): in use, and their positions.
  bool row_ok[2];
  int row_pos[2];
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    const int r = g + 8 * hi;
    row_ok[hi] = r < kR && r / kG < bt.n;
    row_pos[hi] = bt.pos0 + r / kG;
  }

  // q * scale as hi + lo A fragments (unused rows zero): a0 (g, 2c), a1 (g + 8, 2c),
  // a2 (g, 2c + 8), a3 (g + 8, 2c + 8) of each k16 step.
  std::uint32_t qh[D / 16][4], ql[D / 16][4];
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    const int r = g + 8 * hi;
    const float* qrow = sa.q + (bt.t0 + r / kG) * sa.q_stride + std::int64_t{h0 + r % kG} * D + 2 * c;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // k 2c.. and 2c + 8..
        float2 v = make_float2(0.0f, 0.0f);
        if (row_ok[hi]) v = *reinterpret_cast<const float2*>(qrow + ks * 16 + 8 * half);
        split_bf16(v.x * a.scale, v.y * a.scale, qh[ks][2 * half + hi], ql[ks][2 * half + hi]);
      }
    }
  }

  // o[dt][0..1]: row g, o[dt][2..3]: row g + 8.
  float o[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

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

    // Scores s[nt][2 hi + e] of row g + 8 hi at key k0 + 16 warp + 8 nt + 2c + e, log2 units.
    float mx[2] = {m_run[0], m_run[1]};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int hi = i >> 1;
        if (hi == 1 && !kHigh) continue;
        float x = s[nt][i];
        if (a.softcap > 0.0f) x = a.softcap * tanhf(x / a.softcap);
        const int key = k0 + 16 * warp + 8 * nt + 2 * c + (i & 1);
        bool ok = key < end;
        if constexpr (kT > 1) ok = ok && key <= row_pos[hi] && (a.window <= 0 || key > row_pos[hi] - a.window);
        x = ok ? x * kLog2e : -INFINITY;
        s[nt][i] = x;
        mx[hi] = fmaxf(mx[hi], x);
      }
    float corr[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      if (hi == 1 && !kHigh) {
        corr[hi] = 1.0f;
        continue;
      }
      mx[hi] = fmaxf(mx[hi], __shfl_xor_sync(0xffffffffu, mx[hi], 1));
      mx[hi] = fmaxf(mx[hi], __shfl_xor_sync(0xffffffffu, mx[hi], 2));
      const float base = mx[hi] == -INFINITY ? 0.0f : mx[hi];
      corr[hi] = fast_exp2(m_run[hi] - base);
      m_run[hi] = mx[hi];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          s[nt][2 * hi + e] = fast_exp2(s[nt][2 * hi + e] - base);
          rs[hi] += s[nt][2 * hi + e];
        }
      l_run[hi] = l_run[hi] * corr[hi] + rs[hi];
    }
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      o[dt][0] *= corr[0];
      o[dt][1] *= corr[0];
      if constexpr (kHigh) {
        o[dt][2] *= corr[1];
        o[dt][3] *= corr[1];
      }
    }

    // O += P V over this warp's 16 keys, P as hi + lo A fragments (rows g + 8 zero unless kHigh).
    std::uint32_t ph[4], pl[4];
    split_bf16(s[0][0], s[0][1], ph[0], pl[0]);
    split_bf16(s[1][0], s[1][1], ph[2], pl[2]);
    if constexpr (kHigh) {
      split_bf16(s[0][2], s[0][3], ph[1], pl[1]);
      split_bf16(s[1][2], s[1][3], ph[3], pl[3]);
    } else {
      ph[1] = ph[3] = pl[1] = pl[3] = 0;
    }
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

  // Merge the warps' (max, sum, acc) of each row: [kWarps][kR] max and sum, [kWarps][kR][D] acc.
  float* sm_m = reinterpret_cast<float*>(smem);
  float* sm_l = sm_m + kWarps * kR;
  float* sm_acc = sm_l + kWarps * kR;
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    const int r = g + 8 * hi;
    float l = l_run[hi];  // the quad's sum, reduced by the whole warp before any lane leaves
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (r >= kR) continue;
    if (c == 0) {
      sm_m[warp * kR + r] = m_run[hi];
      sm_l[warp * kR + r] = l;
    }
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<float2*>(sm_acc + (warp * kR + r) * D + dt * 8 + 2 * c) =
          make_float2(o[dt][2 * hi], o[dt][2 * hi + 1]);
  }
  __syncthreads();
  for (int i = tid; i < kR * D; i += kThreads) {
    const int r = i / D, d = i % D;
    if (r / kG >= bt.n) break;  // rows past the chunk's end (the rest of the loop is too)
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, sm_m[w * kR + r]);
    float sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float f = sm_m[w * kR + r] == -INFINITY ? 0.0f : fast_exp2(sm_m[w * kR + r] - mx);
      sum += sm_l[w * kR + r] * f;
      acc += sm_acc[(w * kR + r) * D + d] * f;
    }
    const std::int64_t t = bt.t0 + r / kG;
    const int h = h0 + r % kG;
    if (sa.n_splits == 1) {
      // A sink adds exp(sink) to the softmax's denominator (mx and sum are in log2 units).
      if (a.sinks != nullptr) sum += exp2f(a.sinks[h] * kLog2e - mx);
      sa.out[t * sa.out_stride + std::int64_t{h} * D + d] = acc / sum;
    } else {  // merge_kernel's layout; its max is in natural-log units
      float* p = sa.partial + ((t * a.n_heads + h) * sa.n_splits + split) * (D + 2);
      p[2 + d] = acc;
      if (d == 0) {
        p[0] = mx / kLog2e;
        p[1] = sum;
      }
    }
  }
}

template <int D, int kG, int kT>
void launch_dgt(const KvView& kv, const DeviceBatch& b, const AttentionArgs& a, const SplitArgs& sa, Stream s) {
  static_assert(smem_bytes<D>() >= static_cast<int>(sizeof(float)) * kWarps * kG * kT * (D + 2), "merge area");
  static bool attribute_set = false;  // the engine thread is the only caller
  if (!attribute_set) {
    AKV_CUDA_CHECK(cudaFuncSetAttribute(attention_decode_kernel<D, kG, kT>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes<D>()));
    attribute_set = true;
  }
  const std::int64_t groups = split_token_groups(b, kT);
  AKV_CHECK(groups <= 0x7fffffff, "attention: token groups");
  launch(attention_decode_kernel<D, kG, kT>, dim3(static_cast<unsigned>(groups), a.n_heads / kG, sa.n_splits),
         kThreads, smem_bytes<D>(), s, kv, b, a, sa);
}

// One token per block, or 16 / kG tokens of a chunk (the rows of the whole m16 tile).
template <int D, int kG>
void launch_dg(const KvView& kv, const DeviceBatch& b, const AttentionArgs& a, const SplitArgs& sa, Stream s) {
  AKV_CHECK(sa.group_tokens == 1 || sa.group_tokens == 16 / kG, "attention: tokens per block");
  if (sa.group_tokens == 1)
    launch_dgt<D, kG, 1>(kv, b, a, sa, s);
  else
    launch_dgt<D, kG, 16 / kG>(kv, b, a, sa, s);
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
