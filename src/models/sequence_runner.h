// One sequence on its own: a private paged KV cache with an identity block table, prefill and
// decode returning the last position's logits. The simplest way to run a model (CLI generate,
// tests); the engine replaces it with shared paged KV and batching.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "models/model.h"

namespace akv {

class SequenceRunner {
 public:
  static constexpr std::int64_t kBlockSize = 64;

  // Reserves KV for `max_tokens` positions on the model's backend.
  SequenceRunner(Model& model, Backend& backend, std::int64_t max_tokens, DType kv_dtype = DType::F32);

  // Appends `tokens` (a prefill chunk or one decode token) and returns the logits of the last
  // one [vocab_size]; the span stays valid until the next call. Throws Error{InvalidArgument}
  // when the sequence would exceed max_tokens or a token id is outside the vocabulary.
  std::span<const float> append(std::span<const std::int32_t> tokens);
  // append() that returns the greedy id of the last token instead (argmax_row of its logits,
  // picked where the logits are by Model::forward_ids: none reach the host, as in the served
  // path's greedy step). Throws as append().
  std::int32_t append_greedy(std::span<const std::int32_t> tokens);

  std::int64_t n_tokens() const { return n_tokens_; }
  std::int64_t max_tokens() const { return max_tokens_; }
  void reset() { n_tokens_ = 0; }

 private:
  // Checks `tokens` and describes them as one chunk at the end of the sequence (the batch
  // points into chunk_, last_row_ and positions_).
  ForwardBatch batch_for(std::span<const std::int32_t> tokens);

  Model& model_;
  std::int64_t max_tokens_;
  std::int64_t n_tokens_ = 0;
  KvStorage kv_;
  std::vector<std::int32_t> block_table_;
  std::vector<std::int32_t> positions_;
  std::vector<float> logits_;
  SequenceChunk chunk_;
  std::int32_t last_row_ = 0;
};

}  // namespace akv
