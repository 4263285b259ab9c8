// Per-step numbers for metrics, written by the engine thread into a ring allocated once, read
// by any thread as a snapshot. Running totals are atomics. No logging, no allocation on write.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "base/latency_histogram.h"
#include "kv/kv_manager.h"

namespace akv {

// Where one step's time went (ms), read at the phase edges (base/phase_clock.h). The phases add
// up to the step's step_ms: `other` is the rest (Started events, failed requests, the stats).
struct StepPhases {
  double schedule_ms = 0;  // Scheduler::schedule() less its KvManager calls
  double kv_ms = 0;        // within schedule(): prefix match, tier restores, block allocation, release
  double build_ms = 0;     // the batch: id picks, tokens, positions, block tables (StepRunner)
  double forward_ms = 0;   // Model::forward / forward_ids, the backend's synchronization included
  double sample_ms = 0;    // sampling each due token and emitting its event (finishing included)
  double commit_ms = 0;    // KvManager::commit (prefix index, block keys, spills queued), state snapshots
  double other_ms = 0;

  static constexpr std::size_t kCount = 7;
  // {name, ms} in the order above; the names label /metrics series.
  std::array<std::pair<const char*, double>, kCount> named() const {
    return {{{"schedule", schedule_ms}, {"kv", kv_ms}, {"build", build_ms}, {"forward", forward_ms},
             {"sample", sample_ms}, {"commit", commit_ms}, {"other", other_ms}}};
  }
  double sum_ms() const {
    double s = 0;
    for (const auto& [name, ms] : named()) s += ms;
    return s;
  }
};

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
  StepPhases phases;
};

struct EngineTotals {
  std::uint64_t steps = 0;
  std::uint64_t requests_finished = 0;
  std::uint64_t prompt_tokens = 0;
  std::uint64_t cached_prompt_tokens = 0;
  std::uint64_t generated_tokens = 0;
  std::uint64_t preemptions = 0;
  // Finished requests' cacheable prompt blocks (the full blocks before the last prompt token) by
  // where they came from: device memory, the host tier, the disk tier, or none (recomputed).
  std::uint64_t prefix_blocks_device = 0, prefix_blocks_host = 0, prefix_blocks_disk = 0, prefix_blocks_missed = 0;
  StepPhases phases;  // every step's phases added up (ms)
};

struct EngineMetrics {
  EngineTotals totals;
  std::vector<StepStats> recent;  // oldest first, at most the ring's capacity
  LatencyHistogram::Snapshot step_time;  // every step's duration
};

class StepStatsRing {
 public:
  explicit StepStatsRing(std::size_t capacity) : ring_(capacity == 0 ? 1 : capacity) {}

  void record(const StepStats& s) {
    step_time.observe(s.step_ms);
    const auto phases = s.phases.named();
    for (std::size_t i = 0; i < phases.size(); ++i) phase_ms_[i].fetch_add(phases[i].second, std::memory_order_relaxed);
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
  std::atomic<std::uint64_t> prefix_blocks_device{0}, prefix_blocks_host{0}, prefix_blocks_disk{0},
      prefix_blocks_missed{0};
  LatencyHistogram step_time;

  // A finished request's prompt blocks by tier (EngineTotals::prefix_blocks_*): `cached_tokens`
  // of its `prompt_tokens` came from a cache, `host` and `disk` blocks of them from those tiers.
  void count_prefix_blocks(std::int64_t prompt_tokens, std::int64_t cached_tokens, std::int64_t host,
                           std::int64_t disk, std::int32_t block_size) {
    const std::int64_t cacheable = std::max<std::int64_t>(0, prompt_tokens - 1) / block_size;
    const std::int64_t cached = std::min(cacheable, cached_tokens / block_size);
    const std::int64_t from_disk = std::min(cached, disk);
    const std::int64_t from_host = std::min(cached - from_disk, host);
    const auto add = [](std::atomic<std::uint64_t>& c, std::int64_t n) {
      c.fetch_add(static_cast<std::uint64_t>(n), std::memory_order_relaxed);
    };
    add(prefix_blocks_disk, from_disk);
    add(prefix_blocks_host, from_host);
    add(prefix_blocks_device, cached - from_disk - from_host);
    add(prefix_blocks_missed, cacheable - cached);
  }

  EngineTotals totals() const {
    EngineTotals t{steps.load(),          requests_finished.load(),   prompt_tokens.load(),      cached_prompt_tokens.load(),
                   generated_tokens.load(), preemptions.load(),       prefix_blocks_device.load(), prefix_blocks_host.load(),
                   prefix_blocks_disk.load(), prefix_blocks_missed.load(), {}};
    const auto total = [this](std::size_t i) { return phase_ms_[i].load(std::memory_order_relaxed); };
    t.phases = {.schedule_ms = total(0), .kv_ms = total(1), .build_ms = total(2), .forward_ms = total(3),
                .sample_ms = total(4), .commit_ms = total(5), .other_ms = total(6)};
    return t;
  }

 private:
  std::array<std::atomic<double>, StepPhases::kCount> phase_ms_{};  // StepPhases::named() order
  mutable std::mutex mu_;
  std::vector<StepStats> ring_;
  std::uint64_t next_ = 0;
};

}  // namespace akv
