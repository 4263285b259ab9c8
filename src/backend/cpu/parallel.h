// Threading helpers of the CPU fast path: one call per pool thread, and per-thread scratch
// memory that grows on demand and is reused across ops (no allocation in steady state).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"

namespace akv {

// Calls fn(t) once for every thread slot t in [0, pool.n_threads()); returns when all are done.
// Slots run concurrently as the pool's threads claim them, but one thread may run several in turn
// (a descheduled thread's slot is taken by another): fn must not wait for another slot. The
// capture is one reference, so std::function does not allocate.
template <typename Fn>
void run_per_thread(ThreadPool& pool, const Fn& fn) {
  pool.parallel_for(pool.n_threads(), 1, [&fn](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) fn(static_cast<int>(t));
  });
}

// [begin, end) of slot t when n items are split into n_slots contiguous ranges whose sizes are
// multiples of `grain` (except the last).
inline void split_range(std::int64_t n, int n_slots, int t, std::int64_t grain, std::int64_t& begin,
                        std::int64_t& end) {
  std::int64_t chunk = (n + n_slots - 1) / n_slots;
  chunk = (chunk + grain - 1) / grain * grain;
  begin = std::min<std::int64_t>(n, chunk * t);
  end = std::min<std::int64_t>(n, begin + chunk);
}

// Float scratch per thread slot. get(t, n) is only called by slot t while a job runs.
class ThreadScratch {
 public:
  explicit ThreadScratch(int n_slots) : buffers_(static_cast<std::size_t>(n_slots)) {}
  float* get(int t, std::size_t n) {
    std::vector<float>& b = buffers_[static_cast<std::size_t>(t)];
    if (b.size() < n) b.resize(n);
    return b.data();
  }

 private:
  std::vector<std::vector<float>> buffers_;
};

}  // namespace akv
