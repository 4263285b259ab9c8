// Attention of the CPU fast path: flash-style (online softmax over key chunks) in f32, with the
// q.k and p.v products of a chunk done by single-threaded sgemm. Work items are
// (sequence, kv head, tile of queries, range of keys); all query heads sharing a kv head go
// together (GQA), and threads pull items, largest first, from a shared counter. When there are
// fewer than kAttentionSplitItems items (decode: one query, a few kv heads, so 3 items for 2
// threads would leave one idle half the time), each item's keys are split into parts whose
// partial softmax states (running max, sum, unnormalised output) are merged after the parallel
// pass. The split depends only on the batch, not on the thread count (a sequence's output can
// differ by f32 rounding between a batch that splits and one that does not).
#pragma once

#include <vector>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/parallel.h"

namespace akv {

struct AttentionTask {
  std::int32_t seq = 0;      // index into batch.sequences
  std::int32_t kv_head = 0;
  std::int32_t q_begin = 0;  // queries [q_begin, q_begin + q_count) of the chunk
  std::int32_t q_count = 0;
  std::int64_t cost = 0;     // query rows x keys, for ordering
  std::int64_t key_begin = 0;  // keys (positions) [key_begin, key_end) of this item
  std::int64_t key_end = 0;
  std::int32_t part = -1;    // >= 0: a split item, its partial state goes to partial slot `part`
};

// A split item's parts: partial slots [first_part, first_part + n_parts).
struct AttentionMerge {
  AttentionTask task;  // the whole item (all its keys)
  std::int32_t first_part = 0;
  std::int32_t n_parts = 0;
};

// Storage reused across calls.
struct AttentionScratch {
  std::vector<AttentionTask> tasks;
  std::vector<AttentionMerge> merges;
  std::vector<float> partials;
};

// Fewer items than this are split into about this many in all, each part of at least
// kAttentionMinPartKeys keys.
constexpr std::int64_t kAttentionSplitItems = 8;
constexpr std::int64_t kAttentionMinPartKeys = 16;

// Same contract as Backend::attention.
void attention_fast(ThreadPool& pool, const Kernels& kernels, ThreadScratch& scratch,
                    AttentionScratch& work, TensorRef q, const KvStorage& kv, std::int64_t layer,
                    const ForwardBatch& batch, const AttentionParams& p, TensorRef out);

}  // namespace akv
