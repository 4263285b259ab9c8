// Decides each step's work: a list of {sequence, n_tokens} under a token budget (architecture.md
// §3). Decodes first (1 token each, oldest first), then chunks of running prefills (oldest
// first) leaving `admission_reserve_tokens` of the budget, then new or preempted sequences from
// the waiting queue, then the newest running prefills take what is left: a short request that
// arrives behind long prefills is admitted in the next step, and a prefill that is still young
// keeps getting a share instead of waiting for the older ones. A prefill chunk shrinks to the
// KV blocks available; when even a decode cannot get a block, the newest running sequence is
// preempted: its blocks are released (full blocks stay cached) and it goes to the front of the
// waiting queue, to be recomputed from its tokens when readmitted. A waiting sequence whose
// prefix is being loaded from disk in the background (KvManager::restore_pending) stays in the
// queue without holding up the ones behind it. Engine thread only; the plan's vectors are
// reused from step to step.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/sequence.h"
#include "kv/kv_manager.h"

namespace akv {

struct SchedulerConfig {
  std::int32_t max_batch_tokens = 512;  // token budget per step (decodes + prefill chunks)
  std::int32_t max_prefill_chunk = 256; // most prompt tokens one sequence runs in one step
  std::int32_t max_running = 64;        // sequences holding KV at once
  // Of the budget left after decodes, at most half: what the oldest running prefills may not
  // take before admissions and the newest prefills had theirs (the rest goes back to them).
  std::int32_t admission_reserve_tokens = 128;
};

struct ScheduledChunk {
  Sequence* seq = nullptr;
  std::int32_t n_tokens = 0;  // tokens [seq->n_computed, seq->n_computed + n_tokens)
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;  // decodes first
  std::vector<Sequence*> preempted;    // released this step, back in the waiting queue
  std::vector<Sequence*> failed;       // cannot fit in KV memory even alone: the caller ends them
  std::int32_t n_tokens = 0;
  std::int32_t n_decode_tokens = 0;
  std::int32_t n_prefix_hit_tokens = 0;  // tokens admissions found in the prefix cache
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, KvManager& kv);

  // Queues a sequence (state Waiting, no KV). It joins the running batch when it fits.
  void add(Sequence* seq);
  // Removes a sequence from every queue and releases its KV (finished, cancelled or failed).
  void finish(Sequence* seq);
  // Plans the next step. Sequences in the plan have KV blocks for their chunks' positions.
  // Failed sequences are already removed (state Finished, KV released).
  const StepPlan& schedule();

  std::int32_t n_running() const { return static_cast<std::int32_t>(running_.size()); }
  std::int32_t n_waiting() const { return static_cast<std::int32_t>(waiting_.size()); }
  // Waiting sequences skipped by the last schedule() because their blocks are still loading.
  std::int32_t n_restoring() const { return n_restoring_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  void schedule_decodes();
  // Chunks for running prefills, oldest first, while more than `keep` tokens of budget remain.
  void schedule_prefills(std::int32_t keep);
  void admit_waiting();
  // Gives what is left of the budget to running prefills, newest first (growing their chunks).
  void top_up_prefills();
  // Largest chunk (<= want) the KV memory can hold for `seq` right now.
  std::int32_t fit_chunk(const Sequence& seq, std::int32_t want) const;
  // Allocates blocks for n more tokens of running_[i], preempting newer sequences if needed.
  // Returns false if running_[i] itself was preempted or failed.
  bool allocate_or_preempt(std::size_t i, std::int32_t n);
  void preempt_newest();
  void fail(Sequence* seq);
  void add_chunk(Sequence* seq, std::int32_t n);
  void insert_running(Sequence* seq);

  SchedulerConfig config_;
  KvManager& kv_;
  std::vector<Sequence*> running_;  // by arrival, oldest first
  std::deque<Sequence*> waiting_;   // preempted at the front, new at the back
  StepPlan plan_;
  std::int32_t budget_ = 0;
  std::int32_t n_restoring_ = 0;
};

}  // namespace akv
