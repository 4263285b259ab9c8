#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace akv {
namespace {

// One fn(begin, end) call as the pool made it.
struct Call {
  std::int64_t begin, end;
  std::thread::id thread;
};

// Runs one parallel_for and returns its calls; checks that they cover [0, n) exactly once in
// grain-aligned chunks.
std::vector<Call> run_and_check(ThreadPool& pool, std::int64_t n, std::int64_t grain) {
  std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
  std::mutex mu;
  std::vector<Call> calls;
  pool.parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)]++;
    std::lock_guard lock(mu);
    calls.push_back({b, e, std::this_thread::get_id()});
  });
  for (std::int64_t i = 0; i < n; ++i)
    EXPECT_EQ(hits[static_cast<std::size_t>(i)].load(), 1)
        << "n=" << n << " grain=" << grain << " i=" << i;
  for (const Call& c : calls) {
    EXPECT_LT(c.begin, c.end);
    EXPECT_EQ(c.begin % grain, 0) << "n=" << n << " grain=" << grain;
    if (c.end != n) {
      EXPECT_EQ((c.end - c.begin) % grain, 0) << "n=" << n << " grain=" << grain;
    }
  }
  return calls;
}

TEST(ThreadPool, CoversEveryIndexExactlyOnceInGrainAlignedChunks) {
  for (int threads : {1, 2, 3, 5}) {
    for (int spin : {0, 50}) {
      ThreadPool pool(threads, spin);
      for (std::int64_t n : {1, 2, 3, 7, 63, 64, 65, 97, 1001})
        for (std::int64_t grain : {1, 3, 16, 17, 1000}) {
          const std::vector<Call> calls = run_and_check(pool, n, grain);
          // No more calls than chunks of chunk_length (the last one may be short).
          const std::int64_t chunk = pool.chunk_length(n, grain);
          EXPECT_LE(static_cast<std::int64_t>(calls.size()), (n + chunk - 1) / chunk);
          EXPECT_LE(static_cast<std::int64_t>(calls.size()),
                    threads * ThreadPool::kChunksPerThread);
        }
    }
  }
}

TEST(ThreadPool, OneIndexPerThreadSlotGivesOneCallPerSlot) {
  // The per-thread-slot pattern (backend/cpu/parallel.h): n = n_threads, grain 1.
  ThreadPool pool(3);
  const std::vector<Call> calls = run_and_check(pool, pool.n_threads(), 1);
  EXPECT_EQ(calls.size(), 3u);
  for (const Call& c : calls) EXPECT_EQ(c.end - c.begin, 1);
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

TEST(ThreadPool, JobsOfUnevenChunksWithLateWorkersCoverEveryIndex) {
  // Chunks that take very different times, so workers arrive at jobs late or not at all and
  // a job may end while a worker still holds the previous job's claim counter.
  for (int spin : {0, 50}) {
    ThreadPool pool(3, spin);
    std::vector<std::atomic<int>> hits(61);
    for (int round = 0; round < 300; ++round)
      pool.parallel_for(61, 2, [&](std::int64_t b, std::int64_t e) {
        if ((b + round) % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
        for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)]++;
      });
    for (std::size_t i = 0; i < hits.size(); ++i)
      EXPECT_EQ(hits[i].load(), 300) << "spin=" << spin << " i=" << i;
  }
}

TEST(ThreadPool, StalledChunkDoesNotHoldTheRestOfTheJob) {
  // The call that gets index 0 stalls (as a descheduled thread would) until every other index
  // is done: the other threads must take over the rest, leaving the stalled thread one chunk,
  // not a fixed 1/n_threads share of the job.
  for (int threads : {2, 3}) {
    ThreadPool pool(threads, /*spin_micros=*/50);
    const std::int64_t n = 96;
    std::atomic<std::int64_t> done{0};
    std::int64_t stalled_len = 0;
    bool released = false;
    std::mutex mu;
    std::map<std::thread::id, int> calls_per_thread;
    pool.parallel_for(n, 1, [&](std::int64_t b, std::int64_t e) {
      {
        std::lock_guard lock(mu);
        ++calls_per_thread[std::this_thread::get_id()];
      }
      if (b == 0) {
        stalled_len = e - b;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (done.load() != n - stalled_len && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        released = done.load() == n - stalled_len;
      }
      done += e - b;
    });
    EXPECT_EQ(done.load(), n);
    EXPECT_TRUE(released) << "threads=" << threads;
    EXPECT_EQ(stalled_len, pool.chunk_length(n, 1)) << "threads=" << threads;
    EXPECT_LT(stalled_len, n / threads) << "threads=" << threads;
    // The calls spread over the threads: the stalled one made one call, the rest made the others.
    std::int64_t total_calls = 0;
    for (const auto& [id, count] : calls_per_thread) total_calls += count;
    EXPECT_EQ(total_calls, (n + stalled_len - 1) / stalled_len);
    EXPECT_GT(total_calls, threads);
  }
}

}  // namespace
}  // namespace akv
