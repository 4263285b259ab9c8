// A forward batch: the token rows of several sequences, each a chunk of consecutive
// positions (a prefill chunk or one decode token), with the KV blocks that hold its cache.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace akv {

struct SequenceChunk {
  std::int32_t first_row = 0;   // index of its first token in ForwardBatch::tokens
  std::int32_t n_tokens = 0;
  std::int32_t start_pos = 0;   // position of its first token; positions before it are cached
  std::span<const std::int32_t> block_table;  // KV block ids covering [0, start_pos + n_tokens)
  // Hybrid models: the sequence's linear-attention state slot (KvStorage::conv_state,
  // recurrent_state). It holds the state after start_pos tokens; a chunk at start_pos 0 starts
  // from zeros whatever the slot holds.
  std::int32_t state_slot = 0;
};

struct ForwardBatch {
  std::span<const std::int32_t> tokens;      // [n] all chunks' tokens, chunk after chunk
  std::span<const std::int32_t> positions;   // [n] position of each token
  std::span<const SequenceChunk> sequences;
  std::span<const std::int32_t> logit_rows;  // rows whose logits the caller wants, in order
};

// Fills `positions` for `sequences` laid out back to back (a convenience for callers).
inline std::vector<std::int32_t> positions_for(std::span<const SequenceChunk> sequences) {
  std::vector<std::int32_t> pos;
  for (const SequenceChunk& s : sequences)
    for (std::int32_t t = 0; t < s.n_tokens; ++t) pos.push_back(s.start_pos + t);
  return pos;
}

}  // namespace akv
