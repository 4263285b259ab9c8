// The logits of every position of `ids` prefilled as one chunk of one sequence from position 0
// (a fresh F32 KV pool sized for it): what the model tests compare with their references.
// `reversed_table`: the sequence's blocks in the pool's reverse order, so attention must follow
// the block table rather than pool order.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "backend/batch.h"
#include "models/model.h"

namespace akv::test {

inline std::vector<float> prefill_logits(Model& model, Backend& backend, const std::vector<std::int32_t>& ids,
                                         bool reversed_table = false) {
  const ModelConfig& c = model.config();
  const std::int64_t block = 16;
  const std::int64_t n_blocks = (static_cast<std::int64_t>(ids.size()) + block - 1) / block;
  KvStorage kv = backend.alloc_kv(kv_layout_for(c, n_blocks, block, DType::F32));
  std::vector<std::int32_t> table(n_blocks);
  for (std::int64_t i = 0; i < n_blocks; ++i) table[i] = static_cast<std::int32_t>(reversed_table ? n_blocks - 1 - i : i);
  SequenceChunk chunk{.first_row = 0,
                      .n_tokens = static_cast<std::int32_t>(ids.size()),
                      .start_pos = 0,
                      .block_table = table};
  std::vector<std::int32_t> rows(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) rows[i] = static_cast<std::int32_t>(i);
  const std::vector<std::int32_t> pos = positions_for({&chunk, 1});
  ForwardBatch batch{.tokens = ids, .positions = pos, .sequences = {&chunk, 1}, .logit_rows = rows};
  std::vector<float> logits(ids.size() * c.vocab_size);
  model.forward(batch, kv, logits);
  return logits;
}

}  // namespace akv::test
