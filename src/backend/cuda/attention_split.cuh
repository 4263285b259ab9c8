// What the split-K decode attention kernels share (attention.cu on the CUDA cores,
// attention_decode.cu on the tensor cores): their arguments, how many splits a token uses, and
// the tensor-core kernel's entry points.
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
  int n_splits;    // of the grid; token t uses token_keys().splits of them
};

// Token t's first key and key count, and how many splits it uses.
struct TokenKeys {
  int first, count, splits;
};
__device__ __forceinline__ TokenKeys token_keys(const DeviceBatch& b, const AttentionArgs& a, int n_splits, int t) {
  const std::int32_t* info = b.seq_info + 4 * b.token_seq[t];
  const int pos = info[2] + (t - info[0]);
  const int first = a.window > 0 ? max(0, pos - a.window + 1) : 0;
  const int count = pos + 1 - first;
  return {first, count, min(n_splits, max(1, count / kMinSplitKeys))};
}

// The keys [begin, end) split `split` (< keys.splits) of a token walks.
struct KeyRange {
  int begin, end;
};
__device__ __forceinline__ KeyRange split_keys(const TokenKeys& keys, int split) {
  const int split_len = (keys.count + keys.splits - 1) / keys.splits;
  const int begin = keys.first + split * split_len;
  return {begin, min(keys.first + keys.count, begin + split_len)};
}

// attention_decode.cu: the same grid (token, head group of `heads_per_block`, split) and outputs
// (out, or partial rows for merge_kernel) on the tensor cores, for BF16 KV, head_dim 64 or 128,
// 2, 4 or 8 heads per block and q rows of even stride.
bool decode_attention_mma_supported(const KvView& kv, const AttentionArgs& a, const SplitArgs& sa,
                                    int heads_per_block);
void launch_attention_decode_mma(const KvView& kv, const DeviceBatch& b, const AttentionArgs& a, const SplitArgs& sa,
                                 int heads_per_block, Stream s);

}  // namespace akv::cuda
