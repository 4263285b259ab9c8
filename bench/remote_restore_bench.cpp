// Remote tier restore bandwidth (docs/perf/fleet.md): writes --blocks block files of
// --value-bytes to a running Redis through RemoteStore, then reads them all back --rounds times
// two ways, and prints the best and median bytes/s of each: RemoteStore::get_block on --threads
// threads (the remote tier's reads alone), and the server's restore path, a Restorer on
// --threads threads loading one RestoreJob of all the blocks through a DiskStore whose remote
// tier this is (read, header and checksum verified, in the job's memory), a new job each round
// as each resumed agent is. bench/remote_restore_bench.sh runs it beside redis-benchmark GET of
// the same value size against the same Redis, in one run.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/check.h"
#include "bench_util.h"
#include "kv/disk_format.h"
#include "kv/disk_store.h"
#include "kv/remote_store.h"
#include "kv/restorer.h"

namespace {

using akv::bench::Clock;
using akv::bench::pattern;
using akv::bench::seconds_since;
using akv::bench::process_cpu_seconds;

void print_summary(const char* what, std::vector<double> rates, std::vector<double> cpu_per_gb) {
  std::sort(rates.begin(), rates.end());
  std::sort(cpu_per_gb.begin(), cpu_per_gb.end());
  std::printf("%s MB/s: median %.0f best %.0f\n", what, rates[rates.size() / 2] / 1e6, rates.back() / 1e6);
  std::printf("%s CPU s per GB read (this process): median %.3f best %.3f\n", what, cpu_per_gb[cpu_per_gb.size() / 2],
              cpu_per_gb.front());
}

// The blocks as a chain (each one's parent the one before), with a header that matches it.
std::vector<akv::RestoreJob::Block> chain_of(const std::vector<akv::Hash128>& keys) {
  std::vector<akv::RestoreJob::Block> blocks;
  for (std::size_t i = 0; i < keys.size(); ++i)
    blocks.push_back({.key = keys[i],
                      .parent = i == 0 ? akv::Hash128{} : keys[i - 1],
                      .tokens_hash = akv::Hash128{i + 1, 7},
                      .depth = static_cast<std::int32_t>(i)});
  return blocks;
}

// The server's restore path: one job of all the blocks per round through a Restorer over a
// DiskStore (empty directory) whose remote tier is `remote`. Prints each round.
void restore_rounds(akv::RemoteStore& remote, const std::vector<akv::RestoreJob::Block>& chain,
                    std::size_t payload_bytes, int n_threads, int n_rounds) {
  char dir_template[] = "/tmp/akv-restore-bench-XXXXXX";
  AKV_CHECK(::mkdtemp(dir_template) != nullptr, "mkdtemp");
  const std::string dir = dir_template;
  std::vector<double> rates, cpu_per_gb;
  {
    akv::DiskStoreOptions d;
    d.dir = dir;
    d.fingerprint = remote.fingerprint();
    d.shape = {.n_rows = 2, .row_width = static_cast<std::int64_t>(payload_bytes / 8), .dtype = akv::DType::F32};
    d.block_size = 16;
    d.remote = &remote;
    auto disk = akv::DiskStore::open_or_throw(d);
    std::mutex mu;
    std::condition_variable cv;
    int n_done = 0;
    akv::Restorer restorer(disk.get(), [&] {
      std::lock_guard lock(mu);
      ++n_done;
      cv.notify_all();
    }, akv::Restorer::kDefaultMaxBytes, n_threads);
    const double total_bytes = static_cast<double>(remote.value_bytes()) * static_cast<double>(chain.size());
    for (int round = 0; round < n_rounds; ++round) {
      auto job = std::make_shared<akv::RestoreJob>(chain, payload_bytes);
      const Clock::time_point r0 = Clock::now();
      const double cpu0 = process_cpu_seconds();
      restorer.submit(job);
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return n_done == round + 1; });
      }
      const double s = seconds_since(r0);
      cpu_per_gb.push_back((process_cpu_seconds() - cpu0) / (total_bytes / 1e9));
      AKV_CHECK(job->n_loaded() == static_cast<std::int32_t>(chain.size()), "a block was not restored");
      const Clock::time_point f0 = Clock::now();
      job.reset();  // the engine drops a job once its blocks are copied in
      const double free_s = seconds_since(f0);
      rates.push_back(total_bytes / s);
      std::printf("restore %d: %zu blocks on %d threads in %.3f s: %.0f MB/s, %.3f CPU s per GB; job freed in %.1f ms\n",
                  round, chain.size(), n_threads, s, rates.back() / 1e6, cpu_per_gb.back(), free_s * 1e3);
    }
  }
  std::filesystem::remove_all(dir);
  print_summary("restore", rates, cpu_per_gb);
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
  app.add_option("--threads", n_threads, "reading threads (the restorer has Restorer::default_threads(): 3/4 of the cores, 2 to 16)");
  app.add_option("--rounds", n_rounds, "times every block is read (each way)");
  CLI11_PARSE(app, argc, argv);
  AKV_CHECK(value_bytes > akv::kBlockHeaderBytes && (value_bytes - akv::kBlockHeaderBytes) % 8 == 0 && n_blocks > 0 &&
                n_threads > 0 && n_rounds > 0,
            "bad flags (the payload, value bytes less the 128-byte header, must be a multiple of 8)");

  akv::RemoteStoreOptions o;
  o.url = akv::parse_redis_url(url, "--redis");
  o.fingerprint = akv::hash128(pattern(64, static_cast<std::uint64_t>(Clock::now().time_since_epoch().count())));
  o.value_bytes = value_bytes;
  o.timeout_ms = 10000;
  auto remote = akv::RemoteStore::open_or_throw(o);

  std::vector<akv::Hash128> keys;
  for (int i = 0; i < n_blocks; ++i) keys.push_back(akv::hash128(pattern(16, static_cast<std::uint64_t>(i) + 1)));
  const std::vector<akv::RestoreJob::Block> chain = chain_of(keys);
  const std::vector<std::byte> payload = pattern(value_bytes - akv::kBlockHeaderBytes, 7);
  const Clock::time_point w0 = Clock::now();
  for (const akv::RestoreJob::Block& b : chain) {
    const auto header = akv::encode_block_header({.fingerprint = o.fingerprint,
                                                  .key = b.key,
                                                  .parent = b.parent,
                                                  .tokens_hash = b.tokens_hash,
                                                  .n_tokens = 16,
                                                  .payload_bytes = payload.size(),
                                                  .payload_checksum = akv::payload_checksum(payload)});
    while (!remote->put_block(b.key, header, payload)) remote->flush(Clock::now() + std::chrono::seconds(60));
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
    const double cpu0 = process_cpu_seconds();
    for (int t = 0; t < n_threads; ++t)
      threads.emplace_back([&, t] {
        std::vector<std::byte> out;
        for (int i = t; i < n_blocks; i += n_threads)
          n_ok[static_cast<std::size_t>(t)] += remote->get_block(keys[static_cast<std::size_t>(i)], out) ? 1 : 0;
      });
    for (std::thread& t : threads) t.join();
    const double s = seconds_since(r0);
    cpu_per_gb.push_back((process_cpu_seconds() - cpu0) / (total_bytes / 1e9));
    int ok = 0;
    for (int n : n_ok) ok += n;
    AKV_CHECK(ok == n_blocks, "a block was not read back");
    rates.push_back(total_bytes / s);
    std::printf("round %d: read %d blocks on %d threads in %.3f s: %.0f MB/s, %.3f CPU s per GB\n", round, n_blocks,
                n_threads, s, rates.back() / 1e6, cpu_per_gb.back());
  }
  print_summary("get_block", rates, cpu_per_gb);
  restore_rounds(*remote, chain, payload.size(), n_threads, n_rounds);
  remote->erase({}, keys);
  remote->flush(Clock::now() + std::chrono::minutes(1));
  return 0;
}
