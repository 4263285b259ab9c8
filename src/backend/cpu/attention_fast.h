// Attention of the CPU fast path: flash-style (online softmax over key chunks) in f32, with the
// q.k and p.v products of a chunk done by single-threaded sgemm. Work items are
// (sequence, kv head, tile of queries); all query heads sharing a kv head go together (GQA),
// and threads pull items, largest first, from a shared counter.
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
};

// Same contract as Backend::attention. `tasks` is reused storage.
void attention_fast(ThreadPool& pool, const Kernels& kernels, ThreadScratch& scratch,
                    std::vector<AttentionTask>& tasks, TensorRef q, const KvStorage& kv,
                    std::int64_t layer, const ForwardBatch& batch, const AttentionParams& p,
                    TensorRef out);

}  // namespace akv
