// Where a generation request's time goes before Engine::submit (received -> submit: the
// request path's share of the client's TTFT), by phase, and the running totals /metrics shows.
// Not the engine's time after submit (engine/step_stats.h StepPhases).
#pragma once

#include <array>
#include <atomic>
#include <string>
#include <utility>

#include "base/latency_histogram.h"
#include "chat/build_timing.h"

namespace akv {

struct PrepareTiming {
  double parse_ms = 0;     // the body's JSON and the API's fields
  double identify_ms = 0;  // tenant and agent, the admission slot, the agent's retention
  BuildTiming build{};     // PromptBuilder::build: context, render, splice, encode
  double setup_ms = 0;     // the rest of prepare_chat: the output parser, a forced call's grammar
  double wait_ms = 0;      // the rest until submit (a streamed reply: until its writer starts)

  static constexpr std::size_t kCount = 8;
  // {name, ms} in the order above; the names label the log line's and /metrics' phases.
  std::array<std::pair<const char*, double>, kCount> named() const {
    return {{{"parse", parse_ms}, {"identify", identify_ms}, {"context", build.context_ms},
             {"render", build.render_ms}, {"splice", build.splice_ms}, {"encode", build.encode_ms},
             {"setup", setup_ms}, {"wait", wait_ms}}};
  }
  double sum_ms() const {
    double s = 0;
    for (const auto& [name, ms] : named()) s += ms;
    return s;
  }
};

// "parse=0.4 identify=0.0 context=0.1 ..." (ms, one decimal) for the request log line.
std::string format_prepare_phases(const PrepareTiming& t);

// Every submitted request's prepare time: a histogram of the total and the phases' sums.
// observe() from any thread without a lock (relaxed atomics).
class PrepareStats {
 public:
  void observe(double prepare_ms, const PrepareTiming& t) {
    total.observe(prepare_ms);
    const auto phases = t.named();
    for (std::size_t i = 0; i < phases.size(); ++i) phase_ms_[i].fetch_add(phases[i].second, std::memory_order_relaxed);
  }
  // The phases' sums (ms) in PrepareTiming::named() order.
  std::array<double, PrepareTiming::kCount> phase_totals_ms() const {
    std::array<double, PrepareTiming::kCount> out{};
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = phase_ms_[i].load(std::memory_order_relaxed);
    return out;
  }
  LatencyHistogram total;

 private:
  std::array<std::atomic<double>, PrepareTiming::kCount> phase_ms_{};
};

}  // namespace akv
