#include "models/sequence_runner.h"

#include <string>

#include "base/error.h"

namespace akv {

SequenceRunner::SequenceRunner(Model& model, Backend& backend, std::int64_t max_tokens, DType kv_dtype)
    : model_(model), max_tokens_(max_tokens) {
  AKV_CHECK(max_tokens > 0, "SequenceRunner needs room for at least one token");
  const std::int64_t n_blocks = (max_tokens + kBlockSize - 1) / kBlockSize;
  kv_ = alloc_model_kv(backend, model.config(), n_blocks, kBlockSize, kv_dtype);
  for (std::int64_t i = 0; i < n_blocks; ++i) block_table_.push_back(static_cast<std::int32_t>(i));
  logits_.resize(model.config().vocab_size);
}

ForwardBatch SequenceRunner::batch_for(std::span<const std::int32_t> tokens) {
  AKV_CHECK(!tokens.empty(), "append needs at least one token");
  const auto n = static_cast<std::int64_t>(tokens.size());
  if (n_tokens_ + n > max_tokens_)
    throw Error(ErrorKind::InvalidArgument, "sequence of " + std::to_string(n_tokens_ + n) +
                                                " tokens exceeds the context of " + std::to_string(max_tokens_));
  for (std::int32_t id : tokens)
    if (id < 0 || id >= model_.config().vocab_size)
      throw Error(ErrorKind::InvalidArgument, "token id " + std::to_string(id) + " is outside the vocabulary (size " +
                                                  std::to_string(model_.config().vocab_size) + ")");
  chunk_ = {.first_row = 0,
            .n_tokens = static_cast<std::int32_t>(n),
            .start_pos = static_cast<std::int32_t>(n_tokens_),
            .block_table = block_table_};
  positions_ = positions_for({&chunk_, 1});
  last_row_ = chunk_.n_tokens - 1;
  return {.tokens = tokens, .positions = positions_, .sequences = {&chunk_, 1}, .logit_rows = {&last_row_, 1}};
}

std::span<const float> SequenceRunner::append(std::span<const std::int32_t> tokens) {
  const ForwardBatch batch = batch_for(tokens);
  model_.forward(batch, kv_, logits_);
  n_tokens_ += static_cast<std::int64_t>(tokens.size());
  return logits_;
}

std::int32_t SequenceRunner::append_greedy(std::span<const std::int32_t> tokens) {
  const ForwardBatch batch = batch_for(tokens);
  const float temperature = 0.0f;
  const double u = 0.0;
  std::int32_t id = 0;
  model_.forward_ids(batch, kv_, {&temperature, 1}, {&u, 1}, {&id, 1});
  n_tokens_ += static_cast<std::int64_t>(tokens.size());
  return id;
}

}  // namespace akv
