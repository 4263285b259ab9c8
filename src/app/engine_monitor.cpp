#include "app/engine_monitor.h"

#include <algorithm>

#include "base/log.h"

namespace akv {

EngineMonitor::EngineMonitor(const Engine& engine, std::chrono::seconds interval)
    : engine_(engine), interval_(interval), thread_([this] { loop(); }) {}

EngineMonitor::~EngineMonitor() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void EngineMonitor::loop() {
  std::uint64_t last_steps = engine_.metrics().totals.steps;
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, interval_, [this] { return stop_; })) {
    const EngineMetrics m = engine_.metrics();
    if (m.totals.steps == last_steps || m.recent.empty()) continue;  // idle: nothing to say
    const std::uint64_t steps = m.totals.steps - last_steps;
    last_steps = m.totals.steps;
    const StepStats& s = m.recent.back();
    double step_ms = 0;
    std::int64_t prefill = 0, decode = 0;
    const std::size_t n = std::min<std::size_t>(m.recent.size(), steps);
    for (std::size_t i = m.recent.size() - n; i < m.recent.size(); ++i) {
      step_ms += m.recent[i].step_ms;
      prefill += m.recent[i].prefill_tokens;
      decode += m.recent[i].decode_tokens;
    }
    log_info("engine running={} waiting={} restoring={} batch={} steps={} avg_step_ms={:.1f} prefill_tokens={} "
             "decode_tokens={} kv_blocks_used={} kv_blocks_cached={} kv_blocks_free={}",
             s.running, s.waiting, s.restoring, s.batch_size, steps, n ? step_ms / static_cast<double>(n) : 0.0,
             prefill, decode, s.kv.n_used, s.kv.n_cached, s.kv.n_free);
  }
}

}  // namespace akv
