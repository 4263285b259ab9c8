#include "server/metrics.h"

#include <fmt/format.h>

namespace akv {

namespace {
void metric(std::string& out, const char* type, const char* name, const char* help, double v) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, v);
}
}  // namespace

void append_engine_metrics(const EngineMetrics& m, std::string& out) {
  const EngineTotals& t = m.totals;
  metric(out, "counter", "agentkv_engine_steps_total", "engine steps run", static_cast<double>(t.steps));
  metric(out, "counter", "agentkv_requests_finished_total", "requests finished", static_cast<double>(t.requests_finished));
  metric(out, "counter", "agentkv_prompt_tokens_total", "prompt tokens received", static_cast<double>(t.prompt_tokens));
  metric(out, "counter", "agentkv_cached_prompt_tokens_total", "prompt tokens served from the KV cache",
         static_cast<double>(t.cached_prompt_tokens));
  metric(out, "counter", "agentkv_generated_tokens_total", "tokens generated", static_cast<double>(t.generated_tokens));
  metric(out, "counter", "agentkv_preemptions_total", "sequences preempted for KV memory", static_cast<double>(t.preemptions));
  if (m.recent.empty()) return;
  const StepStats& s = m.recent.back();
  metric(out, "gauge", "agentkv_running_sequences", "sequences holding KV", s.running);
  metric(out, "gauge", "agentkv_waiting_sequences", "sequences waiting for admission", s.waiting);
  metric(out, "gauge", "agentkv_last_step_batch_size", "sequences in the last step", s.batch_size);
  metric(out, "gauge", "agentkv_last_step_ms", "duration of the last step", s.step_ms);
  metric(out, "gauge", "agentkv_kv_blocks_used", "KV blocks referenced by sequences", s.kv.n_used);
  metric(out, "gauge", "agentkv_kv_blocks_cached", "KV blocks kept for prefix reuse", s.kv.n_cached);
  metric(out, "gauge", "agentkv_kv_blocks_free", "KV blocks free", s.kv.n_free);
}

}  // namespace akv
