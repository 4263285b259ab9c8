// A fixed pool of worker threads for data-parallel loops (the CPU fast path).
// parallel_for blocks the caller until every chunk is done; the caller runs chunk 0 itself.
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
  // n_threads <= 0 means one per hardware thread.
  explicit ThreadPool(int n_threads = 0, int spin_micros = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over [0, n) split into about n_threads() contiguous ranges, each a
  // multiple of `grain` (except the last).
  void parallel_for(std::int64_t n, std::int64_t grain,
                    const std::function<void(std::int64_t, std::int64_t)>& fn);

 private:
  void worker_loop(int index);

  int spin_micros_ = 0;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::function<void(std::int64_t, std::int64_t)>* job_ = nullptr;
  std::int64_t job_n_ = 0;
  std::int64_t job_chunk_ = 0;
  std::atomic<std::uint64_t> generation_{0};  // bumped (release) after the job_ fields are set
  std::atomic<int> pending_{0};               // workers yet to finish the current job
  std::atomic<bool> stop_{false};
  int sleeping_workers_ = 0;                  // guarded by mu_
  bool caller_sleeping_ = false;              // guarded by mu_
};

}  // namespace akv
