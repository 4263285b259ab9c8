// What the tensor-core attention kernels share about their tiles: the query tile of a prefill
// block (which chunk rows, positions and keys it covers) and the gather of one 16-byte piece of
// a key's K and V rows through the block table into shared memory.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_util.cuh"

namespace akv::cuda {

// Query tile `tile` of a prefill launch (DeviceBatch::tiles): batch rows first_row.. (rows of
// them), positions pos0..last, keys lo..last (lo > 0 only under a sliding window).
struct PrefillTile {
  int first_row, rows, pos0, last, lo;
  const std::int32_t* table;  // the chunk's block table
};
template <int kRows>
__device__ __forceinline__ PrefillTile prefill_tile(const DeviceBatch& b, const AttentionArgs& a, int tile) {
  const std::int32_t* info = b.seq_info + 4 * b.tiles[2 * tile];
  const int q0 = b.tiles[2 * tile + 1];
  PrefillTile t;
  t.first_row = info[0] + q0;
  t.rows = min(kRows, info[1] - q0);
  t.pos0 = info[2] + q0;
  t.last = t.pos0 + t.rows - 1;
  t.lo = a.window > 0 ? max(0, t.pos0 - a.window + 1) : 0;
  t.table = b.tables + info[3];
  return t;
}

// Copies 16 bytes of key p's K and V rows (kc and vc point at the piece within the KV head's
// columns of position 0) to kd and vd by cp.async, or zeros them when !valid: zeros rather than
// stale bytes, since a NaN there would survive P = 0.
__device__ __forceinline__ void gather_kv16(__nv_bfloat16* kd, __nv_bfloat16* vd, const __nv_bfloat16* kc,
                                            const __nv_bfloat16* vc, const KvView& kv, const std::int32_t* table,
                                            int p, bool valid) {
  if (valid) {
    const std::int64_t off =
        (std::int64_t{table[p / kv.block_size]} * kv.block_size + p % kv.block_size) * kv.row_width;
    cp_async16(kd, kc + off);
    cp_async16(vd, vc + off);
  } else {
    *reinterpret_cast<uint4*>(kd) = make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(vd) = make_uint4(0, 0, 0, 0);
  }
}

}  // namespace akv::cuda
