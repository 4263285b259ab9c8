#include "engine/scheduler.h"

#include <algorithm>

#include "base/check.h"
#include "base/phase_clock.h"

namespace akv {

Scheduler::Scheduler(SchedulerConfig config, KvManager& kv) : config_(config), kv_(kv) {
  AKV_CHECK(
      config_.max_batch_tokens > 0 && config_.max_prefill_chunk > 0 && config_.max_running > 0,
      "scheduler limits must be positive");
  AKV_CHECK(config_.admission_reserve_tokens >= 0, "the admission reserve must not be negative");
  running_.reserve(static_cast<std::size_t>(config_.max_running) + 1);
  plan_.chunks.reserve(static_cast<std::size_t>(config_.max_running) + 1);
  plan_.preempted.reserve(static_cast<std::size_t>(config_.max_running) + 1);
  plan_.failed.reserve(static_cast<std::size_t>(config_.max_running) + 1);
  for (std::int32_t slot = config_.max_running; slot-- > 0;) free_state_slots_.push_back(slot);
}

void Scheduler::add(Sequence* seq) {
  AKV_CHECK(seq->state == SeqState::Waiting && !seq->kv.is_open(), "add takes a fresh sequence");
  waiting_.push_back(seq);
}

void Scheduler::finish(Sequence* seq) {
  if (auto it = std::find(running_.begin(), running_.end(), seq); it != running_.end()) {
    running_.erase(it);
    release_state_slot(seq);
  }
  if (auto it = std::find(waiting_.begin(), waiting_.end(), seq); it != waiting_.end())
    waiting_.erase(it);
  kv_.release(seq->kv);  // also drops a background load still running for it
  seq->state = SeqState::Finished;
}

const StepPlan& Scheduler::schedule() {
  plan_.chunks.clear();
  plan_.preempted.clear();
  plan_.failed.clear();
  plan_.n_tokens = plan_.n_decode_tokens = plan_.n_prefix_hit_tokens = 0;
  plan_.kv_ms = 0;
  budget_ = config_.max_batch_tokens;
  schedule_decodes();
  schedule_prefills(std::min(config_.admission_reserve_tokens, budget_ / 2));
  admit_waiting();
  top_up_prefills();
  for (const ScheduledChunk& c : plan_.chunks) {
    plan_.n_tokens += c.n_tokens;
    if (c.seq->remaining() == 1 && c.seq->n_generated() > 0) ++plan_.n_decode_tokens;
  }
  return plan_;
}

void Scheduler::schedule_decodes() {
  for (std::size_t i = 0; i < running_.size() && budget_ > 0; ++i) {
    if (running_[i]->remaining() != 1) continue;
    if (allocate_or_preempt(i, 1)) add_chunk(running_[i], 1);
  }
}

void Scheduler::schedule_prefills(std::int32_t keep) {
  for (std::size_t i = 0; i < running_.size() && budget_ > keep; ++i) {
    Sequence* seq = running_[i];
    if (seq->remaining() <= 1) continue;
    const std::int32_t want =
        std::min({seq->remaining(), config_.max_prefill_chunk, budget_ - keep});
    const std::int32_t n = fit_chunk(*seq, want);
    if (n > 0) {
      AKV_CHECK(kv_allocate(*seq, seq->n_computed + n), "fit_chunk promised blocks");
      add_chunk(seq, n);
    } else if (allocate_or_preempt(i, 1)) {  // no room at all: make some, then run one token
      add_chunk(seq, 1);
    }
  }
}

void Scheduler::admit_waiting() {
  n_restoring_ = 0;
  if (!plan_.preempted.empty()) return;  // memory is short: let the running ones finish first
  auto it = waiting_.begin();
  while (it != waiting_.end() && budget_ > 0 && n_running() < config_.max_running) {
    Sequence* seq = *it;
    if (!seq->kv.is_open()) {
      const ScopedMs kv_time(plan_.kv_ms);
      const std::int32_t held =
          resume_ != nullptr && config_.prefix_reuse && !kv_.restore_planned(seq->kv) ? resume_->held_point(*seq) : -1;
      if (config_.prefix_reuse && kv_.restore_pending(seq->kv, seq->tokens, seq->ns, held)) {  // loading
        ++n_restoring_;
        ++it;
        continue;
      }
      // Without prefix reuse, matching the first token alone opens the sequence and shares nothing.
      const std::span<const std::int32_t> match_tokens =
          config_.prefix_reuse ? std::span<const std::int32_t>(seq->tokens) : std::span(seq->tokens).first(1);
      seq->n_computed = kv_.match(seq->kv, match_tokens, seq->ns, seq->retention);
      if (resume_ != nullptr) trim_to_resume_point(*seq);
      plan_.n_prefix_hit_tokens += seq->n_computed;
      if (seq->n_cached_prompt < 0) seq->n_cached_prompt = seq->n_computed;
    }
    const std::int32_t want = std::min({seq->remaining(), config_.max_prefill_chunk, budget_});
    const std::int32_t n = fit_chunk(*seq, want);
    if (n == 0) {
      if (running_.empty()) {  // everything else is free or evictable: it can never fit
        it = waiting_.erase(it);
        fail(seq);
        continue;
      }
      // Wait for running sequences to finish; give back the matched blocks meanwhile.
      const ScopedMs kv_time(plan_.kv_ms);
      kv_.release(seq->kv);
      seq->n_computed = 0;
      return;
    }
    AKV_CHECK(kv_allocate(*seq, seq->n_computed + n), "fit_chunk promised blocks");
    it = waiting_.erase(it);
    seq->state = SeqState::Running;
    insert_running(seq);
    if (resume_ != nullptr && seq->n_computed > 0) resume_->restore(*seq, seq->n_computed);
    add_chunk(seq, n);
  }
}

void Scheduler::top_up_prefills() {
  for (std::size_t i = running_.size(); i-- > 0 && budget_ > 0;) {
    Sequence* seq = running_[i];
    if (seq->remaining() <= 1) continue;
    auto chunk = std::find_if(plan_.chunks.begin(), plan_.chunks.end(),
                              [seq](const ScheduledChunk& c) { return c.seq == seq; });
    const std::int32_t planned = chunk != plan_.chunks.end() ? chunk->n_tokens : 0;
    const std::int32_t want = std::min(
        {seq->remaining(), config_.max_prefill_chunk, planned + budget_});
    // fit_chunk counts from n_computed over the blocks seq already holds (its planned ones too).
    const std::int32_t n = fit_chunk(*seq, want);
    if (n <= planned) continue;
    AKV_CHECK(kv_allocate(*seq, seq->n_computed + n), "fit_chunk promised blocks");
    budget_ -= n - planned;
    if (chunk != plan_.chunks.end())
      chunk->n_tokens = n;
    else
      plan_.chunks.push_back({seq, n});
  }
}

std::int32_t Scheduler::fit_chunk(const Sequence& seq, std::int32_t want) const {
  const std::int32_t bs = kv_.block_size();
  const std::int64_t capacity =
      (static_cast<std::int64_t>(seq.kv.n_blocks()) + kv_.n_available()) * bs - seq.n_computed;
  auto n = static_cast<std::int32_t>(std::clamp<std::int64_t>(capacity, 0, want));
  if (resume_ == nullptr || n <= 1) return n;
  const std::int32_t every = config_.snapshot_interval;
  if (every > 0) n = std::min(n, (seq.n_computed / every + 1) * every - seq.n_computed);  // next snapshot
  const std::int32_t at = prompt_snapshot_point(seq, bs, config_);
  if (at > seq.n_computed) n = std::min(n, at - seq.n_computed);
  // A chunk that reaches the end stops first at the last block boundary: the state there is what
  // the request leaves as its end snapshot (the KV can only resume at whole blocks).
  const std::int32_t end = seq.n_computed + n, boundary = end / bs * bs;
  if (end == seq.n_tokens() && boundary > seq.n_computed && boundary < end) n = boundary - seq.n_computed;
  return n;
}

void Scheduler::trim_to_resume_point(Sequence& seq) {
  for (;;) {
    const std::int32_t p = resume_->resume_point(seq, seq.n_computed);
    if (p == seq.n_computed) return;
    // Only the prefix up to p: the KV must end where the restored state does.
    kv_.release(seq.kv);
    seq.n_computed = kv_.match(seq.kv, std::span(seq.tokens).first(static_cast<std::size_t>(p) + 1), seq.ns,
                               seq.retention);
  }
}

bool Scheduler::allocate_or_preempt(std::size_t i, std::int32_t n) {
  Sequence* seq = running_[i];
  while (!kv_allocate(*seq, seq->n_computed + n)) {
    if (running_.back() == seq) {
      if (running_.size() == 1)
        fail(seq);
      else
        preempt_newest();
      return false;
    }
    preempt_newest();
  }
  return true;
}

void Scheduler::preempt_newest() {
  Sequence* victim = running_.back();
  running_.pop_back();
  release_state_slot(victim);
  // Its chunk may already be in this step's plan (a decode planned before an older prefill).
  for (auto it = plan_.chunks.begin(); it != plan_.chunks.end(); ++it) {
    if (it->seq == victim) {
      budget_ += it->n_tokens;
      plan_.chunks.erase(it);
      break;
    }
  }
  {
    const ScopedMs kv_time(plan_.kv_ms);
    kv_.release(victim->kv);
  }
  victim->n_computed = 0;
  victim->state = SeqState::Waiting;
  ++victim->n_preemptions;
  waiting_.push_front(victim);
  plan_.preempted.push_back(victim);
}

void Scheduler::fail(Sequence* seq) {
  finish(seq);
  plan_.failed.push_back(seq);
}

bool Scheduler::kv_allocate(Sequence& seq, std::int32_t n_positions) {
  const ScopedMs kv_time(plan_.kv_ms);
  return kv_.allocate(seq.kv, n_positions);
}

void Scheduler::add_chunk(Sequence* seq, std::int32_t n) {
  plan_.chunks.push_back({seq, n});
  budget_ -= n;
}

void Scheduler::insert_running(Sequence* seq) {
  auto at = std::upper_bound(
      running_.begin(), running_.end(), seq,
      [](const Sequence* a, const Sequence* b) { return a->arrival < b->arrival; });
  running_.insert(at, seq);
  AKV_CHECK(!free_state_slots_.empty() && seq->state_slot < 0, "a state slot per running sequence");
  seq->state_slot = free_state_slots_.back();
  free_state_slots_.pop_back();
}

void Scheduler::release_state_slot(Sequence* seq) {
  AKV_CHECK(seq->state_slot >= 0, "a running sequence holds a state slot");
  free_state_slots_.push_back(seq->state_slot);
  seq->state_slot = -1;
}

}  // namespace akv
