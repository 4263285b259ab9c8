// copy_bandwidth: a STREAM-like copy measurement, the memory side of a decode's bandwidth
// bound (docs/perf/cpu_quant.md). Each of N threads memcpy's its slice of a buffer far larger
// than the caches into a second one; reports (bytes read + bytes written) / s of the best of
// several passes, STREAM's "copy" convention, and the read share (half of it).
#include <algorithm>
#include <chrono>
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
  std::vector<char> src(bytes, 1), dst(bytes, 0);  // touched: no page faults in the timing
  double best_s = 1e30;
  for (int p = 0; p < passes; ++p) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const std::size_t slice = bytes / static_cast<std::size_t>(threads);
        std::memcpy(dst.data() + t * slice, src.data() + t * slice, slice);
      });
    }
    for (std::thread& th : pool) th.join();
    best_s = std::min(best_s,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double gbs = 2.0 * static_cast<double>(bytes) / best_s / 1e9;
  std::printf(
      "copy bandwidth: %.1f GB/s (read + write, best of %d passes of %zu MiB, %d threads); read "
      "share %.1f GB/s\n",
      gbs, passes, mib, threads, gbs / 2);
  return dst[bytes / 2] == 1 ? 0 : 1;
}
