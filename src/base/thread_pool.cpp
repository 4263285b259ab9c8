#include "base/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "base/check.h"

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

std::uint64_t pack_claims(std::int64_t next, std::int64_t n_chunks) {
  return static_cast<std::uint64_t>(next) << 32 | static_cast<std::uint64_t>(n_chunks);
}
std::int64_t claims_next(std::uint64_t c) {
  return static_cast<std::int64_t>(c >> 32);
}
std::int64_t claims_count(std::uint64_t c) {
  return static_cast<std::int64_t>(c & 0xffffffffu);
}
bool claimable(std::uint64_t c) {
  return claims_next(c) < claims_count(c);
}

}  // namespace

ThreadPool::ThreadPool(int n_threads, int spin_micros) : spin_micros_(spin_micros) {
  if (n_threads <= 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
  AKV_CHECK(n_threads <= (1 << 20), "thread pool: the chunk count must fit 32 bits");
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_.store(true);
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

std::int64_t ThreadPool::chunk_length(std::int64_t n, std::int64_t grain) const {
  grain = std::max<std::int64_t>(grain, 1);
  const std::int64_t target_chunks = n_threads() * kChunksPerThread;
  std::int64_t chunk = std::max<std::int64_t>((n + target_chunks - 1) / target_chunks, 1);
  return (chunk + grain - 1) / grain * grain;
}

void ThreadPool::parallel_for(std::int64_t n, std::int64_t grain,
                              const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (n <= 0) return;
  const std::int64_t chunk = chunk_length(n, grain);
  const std::int64_t n_chunks = (n + chunk - 1) / chunk;  // <= n_threads() * kChunksPerThread
  if (n_chunks <= 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  // No thread reads these until the store to claims_ below publishes them: the previous job's
  // claims_ admits no claim, and all its claimed chunks are done (chunks_done_ was complete).
  job_ = &fn;
  job_n_ = n;
  job_chunk_ = chunk;
  chunks_done_.store(0, std::memory_order_relaxed);
  claims_.store(pack_claims(0, n_chunks), std::memory_order_release);
  {
    std::lock_guard lock(mu_);  // pairs with a worker's check-then-sleep under mu_
    if (sleeping_workers_ > 0) work_cv_.notify_all();
  }
  run_chunks();
  // Only chunks that some thread claimed are waited for; a worker that has not woken up yet
  // finds nothing left to claim.
  const auto all_done = [this, n_chunks] {
    return chunks_done_.load(std::memory_order_acquire) == n_chunks;
  };
  if (!spin_until(spin_micros_, all_done)) {
    std::unique_lock lock(mu_);
    caller_sleeping_ = true;
    done_cv_.wait(lock, all_done);
    caller_sleeping_ = false;
  }
  job_ = nullptr;
}

void ThreadPool::run_chunks() {
  std::uint64_t c = claims_.load(std::memory_order_acquire);
  for (;;) {
    if (!claimable(c)) return;
    // acquire: the job fields written before the release store that started this job.
    if (!claims_.compare_exchange_weak(c, c + (std::uint64_t{1} << 32), std::memory_order_acquire,
                                       std::memory_order_acquire))
      continue;
    const std::int64_t n_chunks = claims_count(c);
    const std::int64_t begin = claims_next(c) * job_chunk_;
    const std::int64_t end = std::min(job_n_, begin + job_chunk_);
    AKV_CHECK(begin < end, "thread pool: claimed an empty chunk");
    (*job_)(begin, end);
    // release: fn's writes, and this thread's reads of the job fields, before the caller
    // returns or starts the next job.
    if (chunks_done_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_chunks) {
      std::lock_guard lock(mu_);  // the caller checks chunks_done_ under mu_ before sleeping
      if (caller_sleeping_) done_cv_.notify_one();
      return;
    }
    c = claims_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_loop() {
  const auto has_work = [this] {
    return claimable(claims_.load(std::memory_order_relaxed)) ||
           stop_.load(std::memory_order_relaxed);
  };
  for (;;) {
    if (!spin_until(spin_micros_, has_work)) {
      std::unique_lock lock(mu_);
      ++sleeping_workers_;
      work_cv_.wait(lock, has_work);
      --sleeping_workers_;
    }
    if (stop_.load()) return;
    run_chunks();
  }
}

}  // namespace akv
