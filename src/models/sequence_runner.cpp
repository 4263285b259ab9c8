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

std::span<const float> SequenceRunner::append(std::span<const std::int32_t> tokens) {
  AKV_CHECK(!tokens.empty(), "append needs at least one token");
  const auto n = static_cast<std::int64_t>(tokens.size());
  if (n_tokens_ + n > max_tokens_)
    throw Error(ErrorKind::InvalidArgument, "sequence of " + std::to_string(n_tokens_ + n) +
                                                " tokens exceeds the context of " + std::to_string(max_tokens_));
  for (std::int32_t id : tokens)
    if (id < 0 || id >= model_.config().vocab_size)
      throw Error(ErrorKind::InvalidArgument, "token id " + std::to_string(id) + " is outside the vocabulary (size " +
                                                  std::to_string(model_.config().vocab_size) + ")");
  const SequenceChunk chunk{.first_row = 0,
                            .n_tokens = static_cast<std::int32_t>(n),
                            .start_pos = static_cast<std::int32_t>(n_tokens_),
                            .block_table = block_table_};
  positions_ = positions_for({&chunk, 1});
  const std::int32_t last = chunk.n_tokens - 1;
  const ForwardBatch batch{.tokens = tokens, .positions = positions_, .sequences = {&chunk, 1}, .logit_rows = {&last, 1}};
  model_.forward(batch, kv_, logits_);
  n_tokens_ += n;
  return logits_;
}

}  // namespace akv
