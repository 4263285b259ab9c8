#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace akv {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  ThreadPool pool(3);
  for (std::int64_t n : {1, 2, 7, 64, 1001}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, 4, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPool, RunsManyJobsInSequence) {
  ThreadPool pool(2);
  std::atomic<std::int64_t> total{0};
  for (int round = 0; round < 200; ++round)
    pool.parallel_for(100, 1, [&](std::int64_t b, std::int64_t e) { total += e - b; });
  EXPECT_EQ(total.load(), 200 * 100);
}

TEST(ThreadPool, SpinningPoolCoversEveryIndexAcrossManyJobs) {
  ThreadPool pool(3, /*spin_micros=*/50);
  std::vector<std::atomic<int>> hits(97);
  for (int round = 0; round < 2000; ++round)
    pool.parallel_for(97, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) hits[i]++;
    });
  for (std::size_t i = 0; i < hits.size(); ++i) EXPECT_EQ(hits[i].load(), 2000) << "i=" << i;
}

}  // namespace
}  // namespace akv
