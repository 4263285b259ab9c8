// Remote tier restore bandwidth (docs/perf/fleet.md): writes --blocks block files of
// --value-bytes to a running Redis through RemoteStore, then reads them all back with
// RemoteStore::get_block on --threads threads (the restorer's reads), --rounds times, and prints
// the best and median bytes/s. bench/remote_restore_bench.sh runs it beside redis-benchmark
// GET of the same value size against the same Redis, in one run. Not the server's restore path
// (its verification and decode come on top: bench/fleet_resume_bench.py measures that whole).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/check.h"
#include "kv/disk_format.h"
#include "kv/remote_store.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<std::byte> pattern(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> v(n);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::size_t i = 0; i + 8 <= n; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(v.data() + i, &x, 8);
  }
  return v;
}

// This process's user + system CPU seconds so far (all threads).
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

}  // namespace

int main(int argc, char** argv) {
  std::string url;
  std::size_t value_bytes = 737408;  // a 135M-shaped model's f32 16-token block file
  int n_blocks = 256, n_threads = 8, n_rounds = 5;
  CLI::App app{"Remote tier (Redis) restore bandwidth of RemoteStore::get_block"};
  app.add_option("--redis", url, "redis://HOST:PORT[/DB] (its akv:* keys of a random fingerprint are written)")
      ->required();
  app.add_option("--value-bytes", value_bytes, "one block file's bytes (header included)");
  app.add_option("--blocks", n_blocks, "blocks written, then read each round");
  app.add_option("--threads", n_threads, "reading threads (the restorer has Restorer::kDefaultThreads = 8)");
  app.add_option("--rounds", n_rounds, "times every block is read");
  CLI11_PARSE(app, argc, argv);
  AKV_CHECK(value_bytes > akv::kBlockHeaderBytes && n_blocks > 0 && n_threads > 0 && n_rounds > 0, "bad flags");

  akv::RemoteStoreOptions o;
  o.url = akv::parse_redis_url(url, "--redis");
  o.fingerprint = akv::hash128(pattern(64, static_cast<std::uint64_t>(Clock::now().time_since_epoch().count())));
  o.value_bytes = value_bytes;
  o.timeout_ms = 10000;
  auto remote = akv::RemoteStore::open_or_throw(o);

  std::vector<akv::Hash128> keys;
  const std::vector<std::byte> payload = pattern(value_bytes - akv::kBlockHeaderBytes, 7);
  const std::vector<std::byte> header(akv::kBlockHeaderBytes, std::byte{1});
  const Clock::time_point w0 = Clock::now();
  for (int i = 0; i < n_blocks; ++i) {
    keys.push_back(akv::hash128(pattern(16, static_cast<std::uint64_t>(i) + 1)));
    while (!remote->put_block(keys.back(), header, payload)) remote->flush(Clock::now() + std::chrono::seconds(60));
  }
  AKV_CHECK(remote->flush(Clock::now() + std::chrono::minutes(10)), "writes did not finish");
  const double write_s = seconds_since(w0);
  const double total_bytes = static_cast<double>(value_bytes) * n_blocks;
  std::printf("wrote %d blocks of %zu bytes: %.0f MB/s\n", n_blocks, value_bytes, total_bytes / write_s / 1e6);

  std::vector<double> rates, cpu_per_gb;
  for (int round = 0; round < n_rounds; ++round) {
    std::vector<int> n_ok(static_cast<std::size_t>(n_threads), 0);
    std::vector<std::thread> threads;
    const Clock::time_point r0 = Clock::now();
    const double cpu0 = cpu_seconds();
    for (int t = 0; t < n_threads; ++t)
      threads.emplace_back([&, t] {
        std::vector<std::byte> out;
        for (int i = t; i < n_blocks; i += n_threads)
          n_ok[static_cast<std::size_t>(t)] += remote->get_block(keys[static_cast<std::size_t>(i)], out) ? 1 : 0;
      });
    for (std::thread& t : threads) t.join();
    const double s = seconds_since(r0);
    cpu_per_gb.push_back((cpu_seconds() - cpu0) / (total_bytes / 1e9));
    int ok = 0;
    for (int n : n_ok) ok += n;
    AKV_CHECK(ok == n_blocks, "a block was not read back");
    rates.push_back(total_bytes / s);
    std::printf("round %d: read %d blocks on %d threads in %.3f s: %.0f MB/s, %.3f CPU s per GB\n", round, n_blocks,
                n_threads, s, rates.back() / 1e6, cpu_per_gb.back());
  }
  std::sort(rates.begin(), rates.end());
  std::sort(cpu_per_gb.begin(), cpu_per_gb.end());
  std::printf("get_block MB/s: median %.0f best %.0f\n", rates[rates.size() / 2] / 1e6, rates.back() / 1e6);
  std::printf("get_block CPU s per GB read (this process): median %.3f best %.3f\n", cpu_per_gb[cpu_per_gb.size() / 2],
              cpu_per_gb.front());
  remote->erase({}, keys);
  remote->flush(Clock::now() + std::chrono::minutes(1));
  return 0;
}
