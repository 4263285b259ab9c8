#include "engine/runner.h"

#include "base/check.h"
#include "base/phase_clock.h"

namespace akv {

StepRunner::StepRunner(Model& model, KvStorage& kv)
    : model_(model), kv_(kv), vocab_(model.config().vocab_size) {}

void StepRunner::run(const StepPlan& plan, Output output, std::span<const IdPick> picks) {
  AKV_CHECK(output != Output::Ids || picks.size() == plan.chunks.size(), "one id pick per chunk");
  output_ = output;
  tokens_.clear();
  positions_.clear();
  logit_rows_.clear();
  chunk_logit_index_.clear();
  chunks_.clear();
  temperature_.clear();
  u_.clear();
  for (std::size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    const Sequence& s = *c.seq;
    AKV_CHECK(c.n_tokens >= 1 && c.n_tokens <= s.remaining(), "chunk outside the sequence's tokens");
    const auto first_row = static_cast<std::int32_t>(tokens_.size());
    for (std::int32_t t = 0; t < c.n_tokens; ++t) {
      tokens_.push_back(s.tokens[s.n_computed + t]);
      positions_.push_back(s.n_computed + t);
    }
    chunks_.push_back({.first_row = first_row,
                       .n_tokens = c.n_tokens,
                       .start_pos = s.n_computed,
                       .block_table = s.kv.block_table(),
                       .state_slot = s.state_slot});
    const bool wants_logits = c.n_tokens == s.remaining();
    chunk_logit_index_.push_back(wants_logits ? static_cast<std::int32_t>(logit_rows_.size()) : -1);
    if (!wants_logits) continue;
    logit_rows_.push_back(first_row + c.n_tokens - 1);
    if (output == Output::Ids) {
      temperature_.push_back(picks[i].temperature);
      u_.push_back(picks[i].u);
    }
  }
  const ForwardBatch batch{
      .tokens = tokens_, .positions = positions_, .sequences = chunks_, .logit_rows = logit_rows_};
  ids_.resize(logit_rows_.size());
  const std::size_t n_logits = output == Output::Ids ? 0 : logit_rows_.size() * static_cast<std::size_t>(vocab_);
  if (logits_.size() < n_logits) logits_.resize(n_logits);
  forward_ms_ = 0;
  const ScopedMs forward_time(forward_ms_);
  if (output == Output::Ids)
    model_.forward_ids(batch, kv_, temperature_, u_, ids_);
  else
    model_.forward(batch, kv_, std::span<float>(logits_).first(n_logits));
}

std::span<const float> StepRunner::logits_for(std::size_t chunk) const {
  const std::int32_t i = chunk_logit_index_.at(chunk);
  if (i < 0 || output_ != Output::Logits) return {};
  return std::span<const float>(logits_).subspan(static_cast<std::size_t>(i) * vocab_, vocab_);
}

std::int32_t StepRunner::id_for(std::size_t chunk) const {
  const std::int32_t i = chunk_logit_index_.at(chunk);
  if (i < 0 || output_ != Output::Ids) return -1;
  return ids_[static_cast<std::size_t>(i)];
}

}  // namespace akv
