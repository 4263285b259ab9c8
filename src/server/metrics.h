// Prometheus text for the engine's counters and its latest step (GET /metrics).
#pragma once

#include <string>

#include "engine/step_stats.h"

namespace akv {

void append_engine_metrics(const EngineMetrics& m, std::string& out);

}  // namespace akv
