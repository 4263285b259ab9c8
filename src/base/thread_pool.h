// A fixed pool of worker threads for data-parallel loops (the CPU fast path).
// parallel_for cuts [0, n) into a few chunks per thread and the threads (the caller included)
// claim them one at a time from a shared counter, so a thread that is descheduled (the cores
// are shared with other processes) holds up only the chunk it has claimed, not a fixed share.
// Not reentrant: call it from one thread at a time (the engine thread).
// With spin_micros > 0, idle workers poll for the next job that long before sleeping, and the
// caller polls for the workers likewise: back-to-back short jobs (a decode step runs hundreds)
// then skip the futex wake-up, measured at ~40 us per job on a 2-vCPU VM (0.5 us spinning).
// Spinning only pays on cores the process has to itself; on an oversubscribed machine it
// makes every job slower (then pass 0).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace akv {

class ThreadPool {
 public:
  // Chunks per thread a job is cut into (fewer when `grain` does not allow as many): more
  // chunks spread a stalled thread's share finer, but each costs a claim and a completion on
  // shared atomics and starts its weight stream cold, and the batch-1 decode's jobs are short
  // (~35 us: 151 a token for a 135M model). On a 2-vCPU VM, 2 a thread decoded 7-10% faster than
  // 4 and 1 faster still (15-19%), which would leave a stalled thread half of every job
  // (docs/perf/cpu_quant.md).
  static constexpr std::int64_t kChunksPerThread = 2;

  // n_threads <= 0 means one per hardware thread.
  explicit ThreadPool(int n_threads = 0, int spin_micros = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on contiguous chunks that cover [0, n) exactly once, concurrently on
  // the pool's threads; returns when every call has returned. Chunks are a multiple of `grain`
  // long (except the last) and begin at multiples of it. Which thread runs which chunk, and the
  // number of chunks, are not fixed: fn must not depend on them (each index belongs to exactly
  // one call, so per-index results do not depend on the split). With n <= grain, or one thread,
  // the caller runs fn(0, n) itself.
  void parallel_for(std::int64_t n, std::int64_t grain,
                    const std::function<void(std::int64_t, std::int64_t)>& fn);

  // The chunk length parallel_for uses for (n, grain) on this pool.
  std::int64_t chunk_length(std::int64_t n, std::int64_t grain) const;

 private:
  // Claims and runs chunks of the current job until none is left to claim.
  void run_chunks();
  void worker_loop();

  int spin_micros_ = 0;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  // The current job: written by the caller only while no chunk can be claimed (before claims_
  // is published, after every claimed chunk is done); read only by a thread that claimed a chunk.
  const std::function<void(std::int64_t, std::int64_t)>* job_ = nullptr;
  std::int64_t job_n_ = 0;
  std::int64_t job_chunk_ = 0;
  // (next chunk to claim) << 32 | (number of chunks): claimed by compare-exchange, published
  // with release by parallel_for. A claim succeeds only while next < number, so a thread
  // holding a stale value from an earlier job can never claim a chunk that is not current.
  std::atomic<std::uint64_t> claims_{0};
  std::atomic<std::int64_t> chunks_done_{0};  // chunks of the current job that have returned
  std::atomic<bool> stop_{false};
  int sleeping_workers_ = 0;      // guarded by mu_
  bool caller_sleeping_ = false;  // guarded by mu_
};

}  // namespace akv
