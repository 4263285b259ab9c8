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
// reused from step to step. Each running sequence holds one of max_running state slots
// (Sequence::state_slot), taken at admission and given back when it stops running.
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
  // False for models whose state a cached KV prefix cannot restore (hybrid linear-attention
  // models: their recurrent state is not in the KV): every admission computes from token 0.
  bool prefix_reuse = true;
  // With a StateResume (hybrid models' state snapshots): prefill chunks end on multiples of this
  // many tokens (a multiple of the block size), where the engine snapshots the state, and a
  // chunk that would reach the end of a sequence's tokens stops at the last block boundary
  // first. 0: no interval.
  std::int32_t snapshot_interval = 0;
  // With a StateResume: a chunk also stops at the prompt's snapshot point
  // (prompt_snapshot_point), where the engine keeps a snapshot: a later turn renders the
  // generation prompt that ends this prompt differently (templates drop an open <think>, ...),
  // so the prefix it shares ends a few tokens before this prompt's end.
  std::int32_t prompt_snapshot_tail = 16;
};

// The last block boundary at least config.prompt_snapshot_tail tokens before the end of seq's
// prompt (0: none).
inline std::int32_t prompt_snapshot_point(const Sequence& seq, std::int32_t block_size,
                                          const SchedulerConfig& config) {
  const std::int32_t p = seq.n_prompt - config.prompt_snapshot_tail;
  return p > 0 ? p / block_size * block_size : 0;
}

// Hybrid models with state snapshots: how far a sequence can resume on its cached KV prefix, and
// putting the state there into its slot. Called on the engine thread inside schedule().
class StateResume {
 public:
  virtual ~StateResume() = default;
  // The deepest position <= matched (0: none) whose recurrent state can be restored for seq.
  virtual std::int32_t resume_point(const Sequence& seq, std::int32_t matched) = 0;
  // Writes the state at `pos` (a resume_point answer) into seq.state_slot.
  virtual void restore(const Sequence& seq, std::int32_t pos) = 0;
  // Before matching: the deepest position whose state is at hand for seq's tokens (in memory),
  // past which a state block is worth loading in the background with the prefix's KV
  // (KvManager::restore_pending); -1: never load one.
  virtual std::int32_t held_point(const Sequence& seq) = 0;
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
  double kv_ms = 0;  // of schedule()'s time, in KvManager (match, tier restores, allocate, release)
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
  // Admissions then keep only the part of a KV prefix match the state can resume from, and
  // restore that state (nullptr: matches are used whole). Outlives the scheduler.
  void set_state_resume(StateResume* resume) { resume_ = resume; }

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
  // KvManager::allocate for seq, its time added to plan_.kv_ms.
  bool kv_allocate(Sequence& seq, std::int32_t n_positions);
  void insert_running(Sequence* seq);  // and gives it a state slot
  void release_state_slot(Sequence* seq);

  SchedulerConfig config_;
  KvManager& kv_;
  std::vector<Sequence*> running_;  // by arrival, oldest first
  std::deque<Sequence*> waiting_;   // preempted at the front, new at the back
  std::vector<std::int32_t> free_state_slots_;  // of [0, max_running): one per running sequence
  StateResume* resume_ = nullptr;
  // Shrinks seq's fresh match to resume_'s resume point (re-matching the shorter prefix).
  void trim_to_resume_point(Sequence& seq);
  StepPlan plan_;
  std::int32_t budget_ = 0;
  std::int32_t n_restoring_ = 0;
};

}  // namespace akv
