// copy_bandwidth: a STREAM-like copy measurement, the memory side of a decode's bandwidth
// bound (docs/perf/cpu_quant.md). Each of N threads memcpy's its slice of a buffer far larger
// than the caches into a second one; reports (bytes read + bytes written) / s of the best of
// several passes, STREAM's "copy" convention, and the read share (half of it). Then a read-only
// pass (each thread sums its slice), what a weight-streaming GEMV can at best approach.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

int main(int argc, char** argv) {
  CLI::App app{"STREAM-like copy bandwidth"};
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int passes = 5;
  std::size_t mib = 1024;
  app.add_option("--threads", threads, "copying threads")->capture_default_str();
  app.add_option("--passes", passes, "passes; the best is reported")->capture_default_str();
  app.add_option("--mib", mib, "MiB copied per pass")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const std::size_t bytes = mib << 20;
  const std::size_t slice = bytes / static_cast<std::size_t>(threads) / 8 * 8;
  std::vector<char> src(bytes, 1), dst(bytes, 0);  // touched: no page faults in the timing
  // Best wall time of `passes` runs of fn(t) on every thread t.
  const auto best_seconds = [&](const auto& fn) {
    double best_s = 1e30;
    for (int p = 0; p < passes; ++p) {
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t)
        pool.emplace_back([&fn, t] { fn(static_cast<std::size_t>(t)); });
      for (std::thread& th : pool) th.join();
      best_s = std::min(
          best_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best_s;
  };
  const double copy_s = best_seconds(
      [&](std::size_t t) { std::memcpy(dst.data() + t * slice, src.data() + t * slice, slice); });
  std::vector<std::uint64_t> sums(static_cast<std::size_t>(threads) * 8);  // a cache line each
  const double read_s = best_seconds([&](std::size_t t) {
    std::uint64_t acc[4] = {0, 0, 0, 0};
    for (std::size_t i = t * slice; i < (t + 1) * slice; i += 32) {
      for (int j = 0; j < 4; ++j) {
        std::uint64_t v;
        std::memcpy(&v, src.data() + i + 8 * j, 8);
        acc[j] += v;
      }
    }
    sums[t * 8] = acc[0] + acc[1] + acc[2] + acc[3];
  });
  const double gbs = 2.0 * static_cast<double>(slice * threads) / copy_s / 1e9;
  std::printf(
      "copy bandwidth: %.1f GB/s (read + write, best of %d passes of %zu MiB, %d threads); read "
      "share %.1f GB/s\n",
      gbs, passes, mib, threads, gbs / 2);
  std::printf("read bandwidth: %.1f GB/s (each thread sums its slice, best of %d passes)\n",
              static_cast<double>(slice * threads) / read_s / 1e9, passes);
  std::uint64_t total = 0;
  for (std::size_t t = 0; t < sums.size(); t += 8) total += sums[t];
  return dst[bytes / 2] == 1 && total != 0 ? 0 : 1;
}
