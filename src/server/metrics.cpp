#include "server/metrics.h"

#include <fmt/format.h>

namespace akv {

namespace {
void metric(std::string& out, const char* type, const char* name, const char* help, double v) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, v);
}
}  // namespace

void append_histogram(const char* name, const char* help, const LatencyHistogram::Snapshot& h, std::string& out) {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < h.counts.size(); ++i) {
    cumulative += h.counts[i];
    if (i < LatencyHistogram::kBoundsMs.size())
      out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, LatencyHistogram::kBoundsMs[i] / 1000.0, cumulative);
    else
      out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, cumulative);
  }
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, h.sum_ms / 1000.0, name, h.count);
}

void append_engine_metrics(const EngineMetrics& m, std::string& out) {
  const EngineTotals& t = m.totals;
  out += "# HELP agentkv_kv_prefix_hit_blocks_total finished requests' prompt blocks found in a KV tier\n"
         "# TYPE agentkv_kv_prefix_hit_blocks_total counter\n";
  out += fmt::format("agentkv_kv_prefix_hit_blocks_total{{tier=\"device\"}} {}\n", t.prefix_blocks_device);
  out += fmt::format("agentkv_kv_prefix_hit_blocks_total{{tier=\"host\"}} {}\n", t.prefix_blocks_host);
  out += fmt::format("agentkv_kv_prefix_hit_blocks_total{{tier=\"disk\"}} {}\n", t.prefix_blocks_disk);
  metric(out, "counter", "agentkv_kv_prefix_miss_blocks_total",
         "finished requests' full prompt blocks found in no tier (computed)", static_cast<double>(t.prefix_blocks_missed));
  append_histogram("agentkv_step_seconds", "engine step duration", m.step_time, out);
  // The steps' time by phase (engine/step_stats.h StepPhases): the phases add up to
  // agentkv_step_seconds_sum.
  out += "# HELP agentkv_step_phase_seconds_total engine step time by phase\n"
         "# TYPE agentkv_step_phase_seconds_total counter\n";
  for (const auto& [phase, ms] : t.phases.named())
    out += fmt::format("agentkv_step_phase_seconds_total{{phase=\"{}\"}} {}\n", phase, ms / 1000.0);
  metric(out, "counter", "agentkv_engine_steps_total", "engine steps run",
         static_cast<double>(t.steps));
  metric(out, "counter", "agentkv_requests_finished_total", "requests finished",
         static_cast<double>(t.requests_finished));
  metric(out, "counter", "agentkv_prompt_tokens_total", "prompt tokens received",
         static_cast<double>(t.prompt_tokens));
  metric(out, "counter", "agentkv_cached_prompt_tokens_total",
         "prompt tokens served from the KV cache", static_cast<double>(t.cached_prompt_tokens));
  metric(out, "counter", "agentkv_generated_tokens_total", "tokens generated",
         static_cast<double>(t.generated_tokens));
  metric(out, "counter", "agentkv_preemptions_total", "sequences preempted for KV memory",
         static_cast<double>(t.preemptions));
  if (m.recent.empty()) return;
  const StepStats& s = m.recent.back();
  metric(out, "gauge", "agentkv_running_sequences", "sequences holding KV", s.running);
  metric(out, "gauge", "agentkv_waiting_sequences", "sequences waiting for admission", s.waiting);
  metric(out, "gauge", "agentkv_restoring_sequences",
         "waiting sequences whose prefix is loading from disk", s.restoring);
  metric(out, "gauge", "agentkv_last_step_batch_size", "sequences in the last step", s.batch_size);
  metric(out, "gauge", "agentkv_last_step_ms", "duration of the last step", s.step_ms);
  metric(out, "gauge", "agentkv_kv_blocks_used", "KV blocks referenced by sequences", s.kv.n_used);
  metric(out, "gauge", "agentkv_kv_blocks_cached", "KV blocks kept for prefix reuse",
         s.kv.n_cached);
  metric(out, "gauge", "agentkv_kv_blocks_free", "KV blocks free", s.kv.n_free);
  // Cumulative engine-thread seconds in tier movement (each includes what it causes).
  out += "# HELP agentkv_kv_tier_seconds_total engine-thread time moving KV between tiers\n"
         "# TYPE agentkv_kv_tier_seconds_total counter\n";
  const KvTierTimes& tt = s.kv.tier;
  for (const auto& [op, v] : {std::pair{"evict", tt.evict_s}, std::pair{"finish", tt.finish_s},
                              std::pair{"restore", tt.restore_s}, std::pair{"spill", tt.spill_s}})
    out += fmt::format("agentkv_kv_tier_seconds_total{{op=\"{}\"}} {}\n", op, v);
}

void append_prepare_metrics(const PrepareStats& s, std::string& out) {
  append_histogram("agentkv_prepare_seconds", "request received to engine submit (parse, render, tokenize)",
                   s.total.snapshot(), out);
  out += "# HELP agentkv_prepare_phase_seconds_total request path time before submit by phase\n"
         "# TYPE agentkv_prepare_phase_seconds_total counter\n";
  const auto totals = s.phase_totals_ms();
  const auto names = PrepareTiming{}.named();
  for (std::size_t i = 0; i < totals.size(); ++i)
    out += fmt::format("agentkv_prepare_phase_seconds_total{{phase=\"{}\"}} {}\n", names[i].first, totals[i] / 1000.0);
}

void append_tier_metrics(const HostStoreStats* host, const DiskStoreStats* disk, std::string& out) {
  const auto d = [](std::int64_t v) { return static_cast<double>(v); };
  if (host != nullptr) {
    metric(out, "gauge", "agentkv_kv_host_blocks", "KV blocks held by the host tier",
           d(host->n_blocks));
    metric(out, "gauge", "agentkv_kv_host_bytes", "bytes held by the host tier", d(host->bytes));
    metric(out, "gauge", "agentkv_kv_host_max_bytes", "the host tier's budget", d(host->max_bytes));
    metric(out, "counter", "agentkv_kv_host_demoted_total",
           "blocks copied from the device into the host tier", d(host->n_put));
    metric(out, "counter", "agentkv_kv_host_restored_total", "blocks restored from the host tier",
           d(host->n_hits));
    metric(out, "counter", "agentkv_kv_host_evicted_total",
           "blocks dropped from the host tier for room", d(host->n_evicted));
  }
  if (disk != nullptr) {
    metric(out, "gauge", "agentkv_kv_disk_blocks", "usable KV block files", d(disk->n_blocks));
    metric(out, "gauge", "agentkv_kv_disk_bytes", "bytes of the usable block files",
           d(disk->bytes));
    metric(out, "gauge", "agentkv_kv_disk_max_bytes", "the disk tier's budget (0: unlimited)",
           d(disk->max_bytes));
    metric(out, "counter", "agentkv_kv_disk_written_total", "block files written",
           d(disk->n_written));
    metric(out, "counter", "agentkv_kv_disk_restored_total", "blocks loaded from disk",
           d(disk->n_loaded));
    metric(out, "counter", "agentkv_kv_disk_dropped_blocks_total",
           "blocks not written (queue full, paused, over budget, failed, out of time at stop)",
           d(disk->n_dropped));
    metric(out, "counter", "agentkv_kv_disk_dropped_queue_full_total",
           "blocks dropped because the write queue was full (the disk fell behind)",
           d(disk->n_dropped_queue_full));
    metric(out, "counter", "agentkv_kv_disk_dropped_paused_total",
           "blocks dropped while spilling was paused after an error", d(disk->n_dropped_paused));
    metric(out, "counter", "agentkv_kv_disk_dropped_at_stop_total",
           "blocks still queued when the graceful stop ran out of time",
           d(disk->n_dropped_at_stop));
    metric(out, "counter", "agentkv_kv_disk_encoded_blocks_total",
           "blocks encoded into the disk codec (int8, int4: not the raw form)", d(disk->n_encoded));
    metric(out, "counter", "agentkv_kv_disk_encoded_on_io_thread_total",
           "of them, encoded by the IO thread (the encode workers were behind)",
           d(disk->n_encoded_on_io));
    metric(out, "counter", "agentkv_kv_disk_encode_seconds_total",
           "thread time spent encoding blocks for the disk",
           static_cast<double>(disk->encode_us) / 1e6);
    metric(out, "gauge", "agentkv_kv_disk_encode_threads", "the disk tier's encode workers",
           d(disk->encode_threads));
    metric(out, "gauge", "agentkv_kv_disk_queue_blocks", "blocks waiting to be written",
           d(disk->queued_blocks));
    metric(out, "gauge", "agentkv_kv_disk_queue_bytes", "raw bytes of the blocks waiting",
           d(disk->queued_bytes));
    metric(out, "counter", "agentkv_kv_disk_write_batches_total",
           "batches of block writes (one directory fsync each)", d(disk->n_batches));
    metric(out, "counter", "agentkv_kv_disk_write_errors_total", "failed block or manifest writes",
           d(disk->n_write_errors));
    metric(out, "counter", "agentkv_kv_disk_manifest_retries_total",
           "agent manifest writes tried again after a failure", d(disk->n_manifest_retries));
    metric(out, "counter", "agentkv_kv_disk_manifests_lost_total",
           "agent manifests given up after their retries", d(disk->n_manifests_lost));
    metric(out, "counter", "agentkv_kv_disk_rejected_total",
           "files of another model or version, or damaged",
           d(disk->rejected_foreign + disk->rejected_version + disk->rejected_corrupt));
    metric(out, "counter", "agentkv_kv_disk_evicted_total",
           "block files deleted to keep the budget", d(disk->n_evicted));
    metric(out, "counter", "agentkv_kv_disk_collected_total",
           "block files no agent names, deleted for age", d(disk->n_gc));
    metric(out, "counter", "agentkv_kv_disk_over_budget_total",
           "blocks not spilled: the budget is full of pinned blocks", d(disk->n_over_budget));
    metric(out, "gauge", "agentkv_kv_disk_paused", "1 while spilling is paused after an error",
           disk->paused ? 1 : 0);
  }
}

void append_remote_metrics(const RemoteStoreStats& r, const DiskStoreStats* disk, std::string& out) {
  const auto d = [](std::int64_t v) { return static_cast<double>(v); };
  metric(out, "gauge", "agentkv_kv_remote_available", "1 when the last operation on Redis succeeded",
         r.available ? 1 : 0);
  metric(out, "counter", "agentkv_kv_remote_written_total", "blocks written to Redis", d(r.n_written));
  metric(out, "counter", "agentkv_kv_remote_manifests_written_total", "agent manifests written to Redis",
         d(r.n_manifests));
  metric(out, "counter", "agentkv_kv_remote_read_total", "blocks read from Redis", d(r.n_loaded));
  if (disk != nullptr)
    metric(out, "counter", "agentkv_kv_remote_restored_total",
           "blocks read from Redis, verified and restored", d(disk->n_loaded_remote));
  metric(out, "counter", "agentkv_kv_remote_states_written_total",
         "hybrid models' state blocks written to Redis", d(r.n_states_written));
  if (disk != nullptr)
    metric(out, "counter", "agentkv_kv_remote_states_restored_total",
           "of agentkv_kv_remote_restored_total: state blocks", d(disk->n_states_loaded_remote));
  metric(out, "counter", "agentkv_kv_remote_missing_total", "reads that found no block", d(r.n_missing));
  metric(out, "counter", "agentkv_kv_remote_bad_total", "reads of a value of the wrong size", d(r.n_bad));
  metric(out, "counter", "agentkv_kv_remote_errors_total",
         "failed connections or round trips to Redis (each a miss or a write kept for later)", d(r.n_errors));
  metric(out, "counter", "agentkv_kv_remote_unavailable_total",
         "reads answered 'not cached' at once while Redis was unavailable", d(r.n_unavailable));
  metric(out, "counter", "agentkv_kv_remote_dropped_blocks_total",
         "blocks not written to Redis (queue full, or Redis away at stop)", d(r.n_dropped));
  metric(out, "counter", "agentkv_kv_remote_evicted_total", "blocks deleted from Redis for the budget",
         d(r.n_evicted));
  metric(out, "counter", "agentkv_kv_remote_agents_evicted_total",
         "agent manifests deleted from Redis for the budget", d(r.n_agents_evicted));
  metric(out, "gauge", "agentkv_kv_remote_queue_blocks", "blocks waiting to be written to Redis",
         d(r.queued_blocks));
}

}  // namespace akv
