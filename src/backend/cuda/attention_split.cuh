// What the split-K attention kernels share (attention.cu on the CUDA cores, attention_decode.cu
// on the tensor cores, and the prefill kernels when a chunk's tiles alone do not fill the GPU):
// their arguments, which keys a group of query tokens walks and how many splits it uses, the
// merge of the splits, and the tensor-core decode kernel's entry points.
#pragma once

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace akv::cuda {

struct SplitArgs {
  const float* q;
  std::int64_t q_stride;
  float* out;
  std::int64_t out_stride;
  float* partial;  // [n_tokens][n_heads][n_splits][head_dim + 2] when n_splits > 1
  int n_splits;    // of the grid; a token group uses group_keys().splits of them
  // Query tokens per key group: runs of this many tokens of one chunk (aligned to the chunk's
  // start) share their splits' key ranges. 1: every token alone (decode).
  int group_tokens = 1;
  int split_align = 1;  // split lengths are rounded up to a multiple of this many keys
};

// A token group's keys: first, count (the union of its tokens' keys: from the first token's
// window start to the last token's position), how many splits it uses and keys per split.
struct TokenKeys {
  int first, count, splits, len;
};
// The keys of the group holding token t. Every kernel of a launch and its merge call this with
// the same arguments, so they agree on the splits without any host-side table (CUDA graphs).
__device__ __forceinline__ TokenKeys group_keys(const DeviceBatch& b, const AttentionArgs& a, int n_splits,
                                               int group_tokens, int split_align, int t) {
  const std::int32_t* info = b.seq_info + 4 * b.token_seq[t];
  const int q = t - info[0];
  const int q0 = q - q % group_tokens;
  const int q_last = min(q0 + group_tokens, info[1]) - 1;
  const int first = a.window > 0 ? max(0, info[2] + q0 - a.window + 1) : 0;
  const int count = info[2] + q_last + 1 - first;
  int splits = min(n_splits, max(1, count / kMinSplitKeys));
  int len = (count + splits - 1) / splits;
  if (split_align > 1) {
    len = (len + split_align - 1) / split_align * split_align;
    splits = (count + len - 1) / len;
  }
  return {first, count, splits, len};
}
__device__ __forceinline__ TokenKeys group_keys(const DeviceBatch& b, const AttentionArgs& a, const SplitArgs& sa,
                                               int t) {
  return group_keys(b, a, sa.n_splits, sa.group_tokens, sa.split_align, t);
}

// The keys [begin, end) split `split` (< keys.splits) of a group walks.
struct KeyRange {
  int begin, end;
};
__device__ __forceinline__ KeyRange split_keys(const TokenKeys& keys, int split) {
  const int begin = keys.first + split * keys.len;
  return {begin, min(keys.first + keys.count, begin + keys.len)};
}

// The prefill kernels' splits: runs of whole key tiles of this many keys per query tile of
// kPrefillTileRows rows (group_keys with group_tokens = kPrefillTileRows).
inline constexpr int kPrefillSplitAlign = 64;
// Split `split` of the prefill tile whose first batch row is first_row and whose keys are
// [lo, last]: all of them when n_splits == 1; empty (begin == end) past the tile's splits.
__device__ __forceinline__ KeyRange prefill_split_keys(const DeviceBatch& b, const AttentionArgs& a, int n_splits,
                                                       int first_row, int lo, int last, int split) {
  if (n_splits == 1) return {lo, last + 1};
  const TokenKeys keys = group_keys(b, a, n_splits, kPrefillTileRows, kPrefillSplitAlign, first_row);
  if (split >= keys.splits) return {0, 0};
  return split_keys(keys, split);
}

// out[t, h] from the partial (max in natural-log units, sum, acc) rows of the splits token t's
// group used (attention.cu). A split where a token saw no key has max -inf and adds nothing.
void launch_attention_merge(const DeviceBatch& b, const AttentionArgs& a, const SplitArgs& sa, Stream s);

// attention_decode.cu: the grid (token group, head group of `heads_per_block`, split) and
// outputs (out, or partial rows for the merge) of attention.cu on the tensor cores, for BF16 KV,
// head_dim 64 or 128, 2, 4 or 8 heads per block and q rows of even stride. With
// sa.group_tokens == 1 a block holds one token (x = token); with 16 / heads_per_block it holds
// that many consecutive tokens of one chunk (x = prefill tile * split_groups_per_tile + group).
bool decode_attention_mma_supported(const KvView& kv, const AttentionArgs& a, const SplitArgs& sa,
                                    int heads_per_block);
void launch_attention_decode_mma(const KvView& kv, const DeviceBatch& b, const AttentionArgs& a, const SplitArgs& sa,
                                 int heads_per_block, Stream s);

}  // namespace akv::cuda
