#include "base/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace akv {
namespace {

// Spins until done() or `micros` pass; returns done().
template <typename Pred>
bool spin_until(int micros, const Pred& done) {
  if (micros <= 0) return done();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(micros);
  for (int i = 0;; ++i) {
    if (done()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if ((i & 255) == 255 && std::chrono::steady_clock::now() > deadline) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads, int spin_micros) : spin_micros_(spin_micros) {
  if (n_threads <= 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_.store(true);
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(std::int64_t n, std::int64_t grain,
                              const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(grain, 1);
  const std::int64_t n_chunks = std::min<std::int64_t>(n_threads(), (n + grain - 1) / grain);
  if (n_chunks <= 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  std::int64_t chunk = (n + n_chunks - 1) / n_chunks;
  chunk = (chunk + grain - 1) / grain * grain;
  // No worker reads these until the generation bump below publishes them, and the previous
  // job's readers are all done (pending_ reached 0 before the last call returned).
  job_ = &fn;
  job_n_ = n;
  job_chunk_ = chunk;
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  {
    std::lock_guard lock(mu_);  // pairs with a worker's check-then-sleep under mu_
    if (sleeping_workers_ > 0) work_cv_.notify_all();
  }
  fn(0, std::min(chunk, n));
  const auto all_done = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(spin_micros_, all_done)) {
    std::unique_lock lock(mu_);
    caller_sleeping_ = true;
    done_cv_.wait(lock, all_done);
    caller_sleeping_ = false;
  }
  job_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  std::uint64_t seen = 0;
  for (;;) {
    const auto has_work = [&] {
      return generation_.load(std::memory_order_acquire) != seen || stop_.load(std::memory_order_relaxed);
    };
    if (!spin_until(spin_micros_, has_work)) {
      std::unique_lock lock(mu_);
      ++sleeping_workers_;
      work_cv_.wait(lock, has_work);
      --sleeping_workers_;
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    const std::int64_t begin = std::min(job_n_, job_chunk_ * index);
    const std::int64_t end = std::min(job_n_, begin + job_chunk_);
    if (begin < end) (*job_)(begin, end);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(mu_);  // the caller checks pending_ under mu_ before sleeping
      if (caller_sleeping_) done_cv_.notify_one();
    }
  }
}

}  // namespace akv
