// Prefill attention on the tensor cores (FlashAttention-2 style, mma.sync m16n8k16 bf16 with
// f32 accumulators) for BF16 KV and head_dim 64 or 128. One block = 64 query rows of one
// sequence chunk for two query heads of one GQA group (each K/V tile in shared memory serves
// both), or for one head when the group is odd. For head_dim 64/128 each warp takes 32 rows of
// one head as two m16 tiles (2 warps a head), so every K and V fragment read from shared memory
// feeds two mma chains; for head_dim 256 one m16 tile (4 warps a head: 32 rows would need 256 f32
// output accumulators a thread and spill). Q stays in shared memory and is read per k-step. Key/value tiles of 64 positions are gathered
// through the block table with cp.async into padded shared memory, two stages deep.
// Causal and sliding-window masks and the logit softcap are applied to the f32 scores; P stays in
// registers.
#include <algorithm>
#include <cmath>

#include "backend/cuda/attention_split.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_tile.cuh"
#include "backend/cuda/mma_util.cuh"
#ifdef AKV_HAVE_WGMMA
#include "backend/cuda/attention_prefill_wgmma.h"
#endif

namespace akv::cuda {
namespace {

constexpr int kRows = kPrefillTileRows;  // query rows of one head per block
constexpr int kKeys = 64;                // keys per tile
constexpr int kGroupHeads = 2;           // query heads per block when the GQA group is even
constexpr int kStages = 2;               // K/V tiles in flight (3 measured no faster on an H100)
constexpr int kPad = 8;                  // bf16 elements of row padding: conflict-free fragments

using bf16 = __nv_bfloat16;

static_assert(kKeys == kPrefillSplitAlign, "splits are runs of whole key tiles");

// m16 tiles of query rows per warp: two (32 rows) up to head_dim 128, one for head_dim 256.
template <int D>
__host__ __device__ constexpr int warp_tiles() {
  return D <= 128 ? 2 : 1;
}
template <int D>
__host__ __device__ constexpr int warps_per_head() {
  return kRows / (16 * warp_tiles<D>());
}
// Blocks an SM keeps resident (the launch bounds): two up to head_dim 128; one for 256, whose
// accumulators take up to 255 registers a thread and whose tiles ~200 KB of shared memory.
template <int D>
__host__ __device__ constexpr int resident_blocks() {
  return D <= 128 ? 2 : 1;
}

template <int D, int kHeads>
constexpr int smem_bytes() {
  return (kHeads * kRows + 2 * kStages * kKeys) * (D + kPad) * static_cast<int>(sizeof(bf16));
}

template <int D, int kHeads>
__host__ __device__ constexpr int block_threads() {
  return kHeads * warps_per_head<D>() * 32;
}

// One block: query tile `tile` (kRows positions of one chunk) for kHeads consecutive query heads
// that share one KV head (GQA), so every K/V tile brought into shared memory serves
// kHeads * kRows query rows. Warp w takes rows kWarpRows (w % kWarpsPerHead).. of head
// h0 + w / kWarpsPerHead.
template <int D, int kHeads, bool kSoftcap>
__global__ void __launch_bounds__(block_threads<D, kHeads>(), resident_blocks<D>())
    prefill_attention_kernel(const float* __restrict__ q, std::int64_t qs, float* __restrict__ out,
                             std::int64_t os, KvView kv, DeviceBatch b, AttentionArgs a, int n_splits,
                             float* __restrict__ partial) {
  pdl_trigger();
  pdl_wait();
  constexpr int LD = D + kPad;
  constexpr int kMt = warp_tiles<D>();  // m16 tiles of query rows per warp
  constexpr int kWarpRows = 16 * kMt;
  constexpr int kWarpsPerHead = warps_per_head<D>();
  constexpr int kBlockThreads = block_threads<D, kHeads>();
  constexpr int kChunks = D / 8;  // 16-byte pieces of one K/V row
  constexpr int kRowsPerPass = kBlockThreads / kChunks;
  constexpr int kKt = kKeys / 8;  // n8 tiles of scores per tile of keys
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);  // [kHeads * kRows][LD]
  bf16* Ks = Qs + kHeads * kRows * LD;        // [kStages][kKeys][LD]
  bf16* Vs = Ks + kStages * kKeys * LD;       // [kStages][kKeys][LD]

  // Heads vary fastest over the grid, so the longest tiles of every head start first.
  const int tile = b.n_tiles - 1 - static_cast<int>(blockIdx.y);
  const int h0 = blockIdx.x * kHeads;
  const PrefillTile pt = prefill_tile<kRows>(b, a, tile);
  const int first_row = pt.first_row, rows = pt.rows, pos0 = pt.pos0;
  const std::int32_t* table = pt.table;
  const int split = blockIdx.z;
  const KeyRange range = prefill_split_keys(b, a, n_splits, first_row, pt.lo, pt.last, split);
  if (range.begin >= range.end) return;  // the whole block: this tile needs fewer splits
  const int lo = range.begin, end = range.end;
  const int kvh = h0 / (a.n_heads / a.n_kv_heads);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  const int wr = warp % kWarpsPerHead;  // row group of this warp within its head's tile
  const int hl = warp / kWarpsPerHead;  // head of this warp within the block
  const bf16* kc = static_cast<const bf16*>(kv.k) + std::int64_t{kvh} * D + (tid % kChunks) * 8;
  const bf16* vc = static_cast<const bf16*>(kv.v) + std::int64_t{kvh} * D + (tid % kChunks) * 8;

  // Each thread copies one fixed 16-byte column of every kRowsPerPass-th key row.
  auto load_kv = [&](int buf, int kb) {
    const int c8 = (tid % kChunks) * 8;
#pragma unroll
    for (int r = tid / kChunks; r < kKeys; r += kRowsPerPass) {
      const int p = kb + r;
      bf16* kd = Ks + (buf * kKeys + r) * LD + c8;
      bf16* vd = Vs + (buf * kKeys + r) * LD + c8;
      gather_kv16(kd, vd, kc, vc, kv, table, p, p < end);
    }
  };

  const int n_kt = (end - lo + kKeys - 1) / kKeys;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_kt) load_kv(s, lo + s * kKeys);
    cp_async_commit();
  }

  // Q rounded to bf16 into shared memory; the barrier at the top of the first key tile orders
  // these stores before any warp reads them.
  for (int i = tid; i < kHeads * kRows * (D / 4); i += kBlockThreads) {
    const int r = i / (D / 4), c4 = (i % (D / 4)) * 4;
    const int rh = r / kRows, rr = r % kRows;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (rr < rows)
      v = *reinterpret_cast<const float4*>(q + (first_row + rr) * qs + std::int64_t{h0 + rh} * D + c4);
    *reinterpret_cast<std::uint32_t*>(Qs + r * LD + c4) = pack_bf16(v.x, v.y);
    *reinterpret_cast<std::uint32_t*>(Qs + r * LD + c4 + 2) = pack_bf16(v.z, v.w);
  }
  // ldmatrix.x4 of an m16k16 A fragment: lanes 0-15 address rows 0-15 at k 0, lanes 16-31 at k 8.
  const bf16* qa = Qs + (hl * kRows + wr * kWarpRows + (lane & 15)) * LD + (lane >> 4) * 8;

  // Accumulator rows: r = 2 * m-tile + half, row wr * kWarpRows + 16 * (r / 2) + g + 8 * (r % 2).
  float o[kMt][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.0f;
  float m_run[2 * kMt], l_run[2 * kMt];
#pragma unroll
  for (int r = 0; r < 2 * kMt; ++r) {
    m_run[r] = -INFINITY;
    l_run[r] = 0.0f;
  }
  const int qpos0 = pos0 + wr * kWarpRows + g;  // position of accumulator row r: qpos0 + 8 * r
  const float scale_log2 = a.scale * kLog2e;

  for (int it = 0; it < n_kt; ++it) {
    const int kb = lo + it * kKeys;
    // Tile `it` has landed (one group is committed per iteration); after the barrier every warp
    // is done with the buffer the prefetch below overwrites (read in iteration it - 1).
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (it + kStages - 1 < n_kt) load_kv((it + kStages - 1) % kStages, kb + (kStages - 1) * kKeys);
    cp_async_commit();
    const bf16* Kt = Ks + (it % kStages) * kKeys * LD;
    const bf16* Vt = Vs + (it % kStages) * kKeys * LD;

    float sc[kMt][kKt][4];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
      for (int nt = 0; nt < kKt; ++nt) sc[mt][nt][0] = sc[mt][nt][1] = sc[mt][nt][2] = sc[mt][nt][3] = 0.0f;
    // One ldmatrix.x4 of K gives the B fragments of two n8 tiles at one k-step: lanes 0-7 and
    // 8-15 address keys nt*8.. at k 0 and 8, lanes 16-31 the same for keys (nt+1)*8...
    const bf16* kb_addr = Kt + ((lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      std::uint32_t qf[kMt][4];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(qf[mt][0]), "=r"(qf[mt][1]), "=r"(qf[mt][2]), "=r"(qf[mt][3])
                     : "r"(smem_addr(qa + mt * 16 * LD + ks * 16)));
#pragma unroll
      for (int nt = 0; nt < kKt; nt += 2) {
        std::uint32_t r0, r1, r2, r3;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                     : "r"(smem_addr(kb_addr + nt * 8 * LD + ks * 16)));
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) mma_bf16(sc[mt][nt], qf[mt], r0, r1);
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) mma_bf16(sc[mt][nt + 1], qf[mt], r2, r3);
      }
    }

    // Scores in log2 units (exp2 below). Only tiles reaching past this warp's first query or the
    // split's end, and sliding windows, need the mask.
    const bool masked = a.window > 0 || kb + kKeys - 1 > pos0 + wr * kWarpRows || kb + kKeys > end;
    float mx[2 * kMt];
#pragma unroll
    for (int r = 0; r < 2 * kMt; ++r) mx[r] = m_run[r];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
      for (int nt = 0; nt < kKt; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = 2 * mt + (e >> 1);
          float s;
          if constexpr (kSoftcap)
            s = a.softcap * tanhf(sc[mt][nt][e] * a.scale / a.softcap) * kLog2e;
          else
            s = sc[mt][nt][e] * scale_log2;
          if (masked) {
            const int key = kb + nt * 8 + 2 * c + (e & 1);
            const int qp = qpos0 + 8 * r;
            const bool ok = key <= qp && key < end && (a.window <= 0 || key > qp - a.window);
            s = ok ? s : -INFINITY;
          }
          sc[mt][nt][e] = s;
          mx[r] = fmaxf(mx[r], s);
        }
    float base[2 * kMt], corr[2 * kMt];
#pragma unroll
    for (int r = 0; r < 2 * kMt; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      base[r] = mx[r] == -INFINITY ? 0.0f : mx[r];
      corr[r] = fast_exp2(m_run[r] - base[r]);
      m_run[r] = mx[r];
    }
    float rs[2 * kMt];
#pragma unroll
    for (int r = 0; r < 2 * kMt; ++r) rs[r] = 0.0f;
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
      for (int nt = 0; nt < kKt; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = 2 * mt + (e >> 1);
          const float p = fast_exp2(sc[mt][nt][e] - base[r]);
          sc[mt][nt][e] = p;
          rs[r] += p;
        }
#pragma unroll
    for (int r = 0; r < 2 * kMt; ++r) l_run[r] = l_run[r] * corr[r] + rs[r];
#pragma unroll
    for (int mt = 0; mt < kMt; ++mt)
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        o[mt][dt][0] *= corr[2 * mt];
        o[mt][dt][1] *= corr[2 * mt];
        o[mt][dt][2] *= corr[2 * mt + 1];
        o[mt][dt][3] *= corr[2 * mt + 1];
      }

#pragma unroll
    for (int j = 0; j < kKeys / 16; ++j) {
      std::uint32_t pa[kMt][4];
#pragma unroll
      for (int mt = 0; mt < kMt; ++mt) {
        pa[mt][0] = pack_bf16(sc[mt][2 * j][0], sc[mt][2 * j][1]);
        pa[mt][1] = pack_bf16(sc[mt][2 * j][2], sc[mt][2 * j][3]);
        pa[mt][2] = pack_bf16(sc[mt][2 * j + 1][0], sc[mt][2 * j + 1][1]);
        pa[mt][3] = pack_bf16(sc[mt][2 * j + 1][2], sc[mt][2 * j + 1][3]);
      }
      const bf16* vrow = Vt + (j * 16 + (lane & 15)) * LD + (lane >> 4) * 8;
#pragma unroll
      for (int dt = 0; dt < D / 8; dt += 2) {
        std::uint32_t r0, r1, r2, r3;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                     : "r"(smem_addr(vrow + dt * 8)));
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) mma_bf16(o[mt][dt], pa[mt], r0, r1);
#pragma unroll
        for (int mt = 0; mt < kMt; ++mt) mma_bf16(o[mt][dt + 1], pa[mt], r2, r3);
      }
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int r = 0; r < 2 * kMt; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int row = wr * kWarpRows + 16 * (r / 2) + g + 8 * (r % 2);
    if (row >= rows) continue;
    const std::int64_t t = first_row + row;
    if (n_splits > 1) {  // merge_kernel's partial row: max in natural-log units, sum, acc
      float* p = partial + ((t * a.n_heads + h0 + hl) * n_splits + split) * (D + 2);
      if (c == 0) {
        p[0] = m_run[r] / kLog2e;
        p[1] = l;
      }
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt)
        *reinterpret_cast<float2*>(p + 2 + dt * 8 + 2 * c) =
            make_float2(o[r / 2][dt][2 * (r % 2)], o[r / 2][dt][2 * (r % 2) + 1]);
      continue;
    }
    // A sink adds exp(sink) to the softmax's denominator (m_run and l are in log2 units).
    if (a.sinks != nullptr) l += exp2f(a.sinks[h0 + hl] * kLog2e - m_run[r]);
    const float inv = 1.0f / l;
    float* orow = out + t * os + std::int64_t{h0 + hl} * D + 2 * c;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<float2*>(orow + dt * 8) =
          make_float2(o[r / 2][dt][2 * (r % 2)] * inv, o[r / 2][dt][2 * (r % 2) + 1] * inv);
  }
}

template <int D, int kHeads, bool kSoftcap>
void launch_dhs(TensorRef q, const KvView& kv, const DeviceBatch& b, const AttentionArgs& a, int n_splits,
                float* partial, TensorRef out, Stream s) {
  static bool attribute_set = false;  // the engine thread is the only caller
  if (!attribute_set) {
    AKV_CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_kernel<D, kHeads, kSoftcap>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes<D, kHeads>()));
    attribute_set = true;
  }
  launch(prefill_attention_kernel<D, kHeads, kSoftcap>, dim3(a.n_heads / kHeads, b.n_tiles, n_splits),
         block_threads<D, kHeads>(), smem_bytes<D, kHeads>(), s, static_cast<const float*>(q.data), q.stride,
         static_cast<float*>(out.data), out.stride, kv, b, a, n_splits, partial);
}

template <int D, int kHeads>
void launch_dh(TensorRef q, const KvView& kv, const DeviceBatch& b, const AttentionArgs& a, int n_splits,
               float* partial, TensorRef out, Stream s) {
  if (a.softcap > 0.0f)
    launch_dhs<D, kHeads, true>(q, kv, b, a, n_splits, partial, out, s);
  else
    launch_dhs<D, kHeads, false>(q, kv, b, a, n_splits, partial, out, s);
}

// Two query heads per block when the GQA group and the shared memory allow it (104 KB for
// head_dim 128: sm_80/sm_90; 198 KB for 256: sm_90); else one head (87 KB for 128: sm_86/sm_89
// too; 165 KB for 256: sm_90 only, so head_dim 256 is not supported below it).
int smem_optin() {
  static int bytes = -1;  // the engine thread is the only caller
  if (bytes < 0) {
    int dev = 0;
    AKV_CUDA_CHECK(cudaGetDevice(&dev));
    AKV_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  }
  return bytes;
}

template <int D>
int heads_per_block(const AttentionArgs& a) {
  return (a.n_heads / a.n_kv_heads) % kGroupHeads == 0 && smem_bytes<D, kGroupHeads>() <= smem_optin() ? kGroupHeads
                                                                                                        : 1;
}

template <int D>
void launch_d(TensorRef q, const KvView& kv, const DeviceBatch& b, const AttentionArgs& a, int n_splits,
              float* partial, TensorRef out, Stream s) {
  if (heads_per_block<D>(a) == kGroupHeads)
    launch_dh<D, kGroupHeads>(q, kv, b, a, n_splits, partial, out, s);
  else
    launch_dh<D, 1>(q, kv, b, a, n_splits, partial, out, s);
}

}  // namespace

bool prefill_attention_supported(DType kv_dtype, std::int32_t head_dim) {
  return kv_dtype == DType::BF16 &&
         (head_dim == 64 || head_dim == 128 || (head_dim == 256 && smem_bytes<256, 1>() <= smem_optin()));
}

int prefill_attention_splits(const DeviceBatch& b, const AttentionArgs& a, int sm_count) {
  int heads = a.head_dim == 64    ? heads_per_block<64>(a)
              : a.head_dim == 128 ? heads_per_block<128>(a)
                                  : heads_per_block<256>(a);
  int resident = a.head_dim == 256 ? resident_blocks<256>() : resident_blocks<128>();  // the launch bounds
#ifdef AKV_HAVE_WGMMA
  if (prefill_attention_wgmma_supported(a)) {
    heads = prefill_attention_wgmma_heads(a);
    resident = 4 / heads;
  }
#endif
  const std::int64_t blocks = std::int64_t{b.n_tiles} * (a.n_heads / heads);
  const std::int64_t slots = std::int64_t{sm_count} * resident;
  if (blocks >= 2 * slots) return 1;  // the tiles alone fill the GPU twice over
  // The split count with the least modelled time, in units of one block's pass over one 64-key
  // tile: the waves of blocks times the key tiles (plus one for the block's own start and end)
  // each block walks, plus the merge's traffic (every split writes and the merge reads a
  // (head_dim + 2)-float row per query row and head: ~1.5M such floats cost about one tile
  // pass). Waves are counted whole: a grid just past a multiple of the resident blocks pays a
  // whole extra wave, which rounding "about two waves" up did not see (512 query rows after 16K
  // keys: 5 splits, 2.4 waves, where 2 splits run in one).
  const std::int64_t key_tiles = (std::int64_t{b.max_keys} + kPrefillSplitAlign - 1) / kPrefillSplitAlign;
  const double merge_per_split = double(b.n_tokens) * a.n_heads * (a.head_dim + 2) / 1.5e6;
  const std::int64_t most = std::min<std::int64_t>(std::max(1, b.max_keys / kMinPrefillSplitKeys), 65535);
  int best = 1;
  double best_cost = 0;
  for (std::int64_t s = 1; s <= most; ++s) {
    const std::int64_t waves = (blocks * s + slots - 1) / slots;
    const std::int64_t tiles = (key_tiles + s - 1) / s;
    const double cost = double(waves) * double(tiles + 1) + (s > 1 ? merge_per_split * double(s) : 0.0);
    if (s == 1 || cost < best_cost) {
      best = static_cast<int>(s);
      best_cost = cost;
    }
  }
  return best;
}

void launch_attention_prefill(TensorRef q, const KvView& kv, const DeviceBatch& b, const AttentionArgs& a,
                              int n_splits, float* partial, TensorRef out, Stream s) {
  AKV_CHECK(prefill_attention_supported(kv.dtype, a.head_dim), "prefill attention: BF16 KV, head_dim 64/128/256");
  AKV_CHECK(reinterpret_cast<std::uintptr_t>(q.data) % 16 == 0 && q.stride % 4 == 0 && kv.row_width % 8 == 0,
            "prefill attention: q rows and KV rows must be 16-byte aligned");
  AKV_CHECK(n_splits >= 1 && n_splits <= 65535 && (n_splits == 1 || partial != nullptr), "prefill attention: splits");
  if (b.n_tiles == 0) return;
  AKV_CHECK(b.n_tiles <= 65535, "prefill attention: at most 65535 query tiles per launch");
#ifdef AKV_HAVE_WGMMA
  if (prefill_attention_wgmma_supported(a)) {
    launch_attention_prefill_wgmma(q, kv, b, a, n_splits, partial, out, s);
  } else
#endif
  {
    if (a.head_dim == 64)
      launch_d<64>(q, kv, b, a, n_splits, partial, out, s);
    else if (a.head_dim == 128)
      launch_d<128>(q, kv, b, a, n_splits, partial, out, s);
    else
      launch_d<256>(q, kv, b, a, n_splits, partial, out, s);
    AKV_CUDA_CHECK_LAUNCH();
  }
  if (n_splits > 1) {
    const SplitArgs sa{static_cast<const float*>(q.data), q.stride, static_cast<float*>(out.data), out.stride,
                       partial, n_splits, kPrefillTileRows, kPrefillSplitAlign};
    launch_attention_merge(b, a, sa, s);
  }
}

}  // namespace akv::cuda
