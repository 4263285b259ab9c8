// A histogram of durations for Prometheus (TTFT, restore time, step time): fixed bucket
// bounds in milliseconds, observe() from any thread without a lock or an allocation (relaxed
// atomics: a snapshot may be a step behind, never torn per bucket), read as a snapshot.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace akv {

class LatencyHistogram {
 public:
  // Upper bounds (ms) of the buckets; one more bucket (+Inf) follows.
  static constexpr std::array<double, 15> kBoundsMs = {1,   2.5,  5,    10,   25,    50,    100,  250,
                                                       500, 1000, 2500, 5000, 10000, 30000, 60000};
  struct Snapshot {
    std::array<std::uint64_t, kBoundsMs.size() + 1> counts{};  // per bucket, not cumulative
    std::uint64_t count = 0;
    double sum_ms = 0;
  };

  void observe(double ms) {
    std::size_t i = 0;
    while (i < kBoundsMs.size() && ms > kBoundsMs[i]) ++i;
    counts_[i].fetch_add(1, std::memory_order_relaxed);
    sum_ms_.fetch_add(ms, std::memory_order_relaxed);
  }

  Snapshot snapshot() const {
    Snapshot s;
    for (std::size_t i = 0; i < counts_.size(); ++i) {
      s.counts[i] = counts_[i].load(std::memory_order_relaxed);
      s.count += s.counts[i];
    }
    s.sum_ms = sum_ms_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  std::array<std::atomic<std::uint64_t>, kBoundsMs.size() + 1> counts_{};
  std::atomic<double> sum_ms_{0};
};

}  // namespace akv
