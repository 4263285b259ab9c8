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

}  // namespace
}  // namespace akv
