// Prometheus text for the engine's counters and its latest step, and the KV tiers' sizes and
// counters (GET /metrics).
#pragma once

#include <string>

#include "engine/step_stats.h"
#include "kv/disk_store.h"
#include "kv/host_store.h"
#include "kv/remote_store.h"
#include "server/prepare_timing.h"

namespace akv {

// Includes the step-time histogram, its phases and the per-tier prefix hit/miss block counters.
void append_engine_metrics(const EngineMetrics& m, std::string& out);
// The request path before submit: agentkv_prepare_seconds (histogram) and
// agentkv_prepare_phase_seconds_total{phase} (PrepareTiming's phases, adding up to its _sum).
void append_prepare_metrics(const PrepareStats& s, std::string& out);
// A Prometheus histogram `name` (in seconds: _bucket{le=...}, _sum, _count).
void append_histogram(const char* name, const char* help, const LatencyHistogram::Snapshot& h, std::string& out);
// Either may be null (no such tier): its metrics are left out.
void append_tier_metrics(const HostStoreStats* host, const DiskStoreStats* disk, std::string& out);
// The remote tier's counters (agentkv_kv_remote_*).
void append_remote_metrics(const RemoteStoreStats& remote, const DiskStoreStats* disk, std::string& out);

}  // namespace akv
