// Per-step numbers for metrics, written by the engine thread into a ring allocated once, read
// by any thread as a snapshot. Running totals are atomics. No logging, no allocation on write.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "kv/kv_manager.h"

namespace akv {

struct StepStats {
  std::uint64_t step = 0;
  std::int32_t batch_size = 0;       // sequences in the forward batch
  std::int32_t prefill_tokens = 0;   // prompt (or recompute) tokens run this step
  std::int32_t decode_tokens = 0;
  std::int32_t prefix_hit_tokens = 0;
  std::int32_t running = 0, waiting = 0;
  std::int32_t restoring = 0;        // of waiting: their prefix is being loaded from disk
  std::int32_t preempted = 0;
  KvUsage kv;
  double step_ms = 0.0;
};

struct EngineTotals {
  std::uint64_t steps = 0;
  std::uint64_t requests_finished = 0;
  std::uint64_t prompt_tokens = 0;
  std::uint64_t cached_prompt_tokens = 0;
  std::uint64_t generated_tokens = 0;
  std::uint64_t preemptions = 0;
};

struct EngineMetrics {
  EngineTotals totals;
  std::vector<StepStats> recent;  // oldest first, at most the ring's capacity
};

class StepStatsRing {
 public:
  explicit StepStatsRing(std::size_t capacity) : ring_(capacity == 0 ? 1 : capacity) {}

  void record(const StepStats& s) {
    std::lock_guard lock(mu_);  // held for one copy; readers copy the ring under it
    ring_[next_ % ring_.size()] = s;
    ++next_;
  }
  std::vector<StepStats> snapshot() const {
    std::lock_guard lock(mu_);
    std::vector<StepStats> out;
    const std::uint64_t n = std::min<std::uint64_t>(next_, ring_.size());
    out.reserve(n);
    for (std::uint64_t i = next_ - n; i < next_; ++i) out.push_back(ring_[i % ring_.size()]);
    return out;
  }

  std::atomic<std::uint64_t> steps{0}, requests_finished{0}, prompt_tokens{0}, cached_prompt_tokens{0},
      generated_tokens{0}, preemptions{0};

  EngineTotals totals() const {
    return {steps.load(), requests_finished.load(), prompt_tokens.load(), cached_prompt_tokens.load(),
            generated_tokens.load(), preemptions.load()};
  }

 private:
  mutable std::mutex mu_;
  std::vector<StepStats> ring_;
  std::uint64_t next_ = 0;
};

}  // namespace akv
