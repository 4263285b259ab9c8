// Prometheus text for histograms and the per-tier prefix block counters.
#include <gtest/gtest.h>

#include "engine/step_stats.h"
#include "server/metrics.h"

namespace akv {
namespace {

TEST(Metrics, HistogramIsCumulativeInSeconds) {
  LatencyHistogram h;
  h.observe(0.5);   // <= 1 ms
  h.observe(30);    // <= 50 ms
  h.observe(1e6);   // +Inf
  std::string out;
  append_histogram("x_seconds", "help", h.snapshot(), out);
  EXPECT_NE(out.find("# TYPE x_seconds histogram\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_bucket{le=\"0.001\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_bucket{le=\"0.025\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_bucket{le=\"0.05\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_bucket{le=\"60\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_count 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_seconds_sum 1000.0305\n"), std::string::npos) << out;
}

TEST(Metrics, PrefixBlocksByTier) {
  StepStatsRing ring(4);
  // 97 prompt tokens in blocks of 16: 6 cacheable blocks; 80 cached = 5 blocks, 2 from disk, 1 from host.
  ring.count_prefix_blocks(97, 80, /*host=*/1, /*disk=*/2, 16);
  // A cold request: 3 cacheable blocks, none cached.
  ring.count_prefix_blocks(50, 0, 0, 0, 16);
  const EngineTotals t = ring.totals();
  EXPECT_EQ(t.prefix_blocks_disk, 2u);
  EXPECT_EQ(t.prefix_blocks_host, 1u);
  EXPECT_EQ(t.prefix_blocks_device, 2u);
  EXPECT_EQ(t.prefix_blocks_missed, 1u + 3u);
  std::string out;
  append_engine_metrics({t, {}, {}}, out);
  EXPECT_NE(out.find("agentkv_kv_prefix_hit_blocks_total{tier=\"disk\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("agentkv_kv_prefix_miss_blocks_total 4\n"), std::string::npos) << out;
}

TEST(Metrics, StepPhasesAreCountersInSecondsThatAddUpToTheStepTime) {
  StepStatsRing ring(4);
  StepStats s;
  s.phases = {.schedule_ms = 1, .kv_ms = 2, .build_ms = 3, .forward_ms = 40, .sample_ms = 5, .commit_ms = 6, .other_ms = 7};
  s.step_ms = s.phases.sum_ms();
  ring.record(s);
  ring.record(s);
  std::string out;
  append_engine_metrics({ring.totals(), ring.snapshot(), ring.step_time.snapshot()}, out);
  EXPECT_NE(out.find("# TYPE agentkv_step_phase_seconds_total counter\n"), std::string::npos) << out;
  EXPECT_NE(out.find("agentkv_step_phase_seconds_total{phase=\"forward\"} 0.08\n"), std::string::npos) << out;
  EXPECT_NE(out.find("agentkv_step_phase_seconds_total{phase=\"kv\"} 0.004\n"), std::string::npos) << out;
  EXPECT_NE(out.find("agentkv_step_phase_seconds_total{phase=\"other\"} 0.014\n"), std::string::npos) << out;
  EXPECT_NE(out.find("agentkv_step_seconds_sum 0.128\n"), std::string::npos) << out;
}

TEST(Metrics, PreparePhasesAndTheirLogLine) {
  PrepareTiming t{.parse_ms = 1.0, .identify_ms = 0.5, .build = {.context_ms = 0.5, .render_ms = 2, .splice_ms = 0, .encode_ms = 6},
                  .setup_ms = 0.5, .wait_ms = 1.5};
  EXPECT_EQ(format_prepare_phases(t),
            "parse=1.0 identify=0.5 context=0.5 render=2.0 splice=0.0 encode=6.0 setup=0.5 wait=1.5");
  PrepareStats stats;
  stats.observe(t.sum_ms(), t);
  stats.observe(t.sum_ms(), t);
  std::string out;
  append_prepare_metrics(stats, out);
  EXPECT_NE(out.find("agentkv_prepare_seconds_count 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("agentkv_prepare_seconds_sum 0.024\n"), std::string::npos) << out;
  EXPECT_NE(out.find("agentkv_prepare_phase_seconds_total{phase=\"encode\"} 0.012\n"), std::string::npos) << out;
  EXPECT_NE(out.find("agentkv_prepare_phase_seconds_total{phase=\"wait\"} 0.003\n"), std::string::npos) << out;
}

}  // namespace
}  // namespace akv
