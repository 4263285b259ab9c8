#include "base/thread_pool.h"

#include <algorithm>

namespace akv {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
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
  {
    std::lock_guard lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = chunk;
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  work_cv_.notify_all();
  fn(0, std::min(chunk, n));
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  std::uint64_t seen = 0;
  for (;;) {
    const std::function<void(std::int64_t, std::int64_t)>* job;
    std::int64_t begin, end;
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      begin = std::min(job_n_, job_chunk_ * index);
      end = std::min(job_n_, begin + job_chunk_);
    }
    if (begin < end) (*job)(begin, end);
    {
      std::lock_guard lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

}  // namespace akv
