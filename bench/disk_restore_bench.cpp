// The disk tier's restore after a restart (docs/perf/serving.md, "The disk return's load"): an
// 8B-shaped agent (32 layers, 8 KV heads x 128, bf16: 2 MiB blocks of 16 tokens; 1,024 blocks
// = 16K tokens) written to a disk tier in each codec, the store reopened (a restart: the files
// stay in the page cache), then loaded back by a Restorer into host-tier slots (the server's
// path with a host tier) or into its own buffers, with 1 and N threads. Also the ceiling: the
// same files read with pread alone, N threads, no verification.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "backend/kv_codec.h"
#include "base/check.h"
#include "bench_util.h"
#include "kv/disk_store.h"
#include "kv/host_store.h"
#include "kv/restorer.h"

namespace {

using akv::bench::Clock;
using akv::bench::seconds_since;

// KV-like bf16 values (the int8 codec's ranges depend on them): noise, a few outlier channels.
std::vector<std::byte> kv_like_block(const akv::BlockShape& s, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<std::byte> raw(s.raw_bytes());
  auto* out = reinterpret_cast<std::uint16_t*>(raw.data());
  for (std::int64_t i = 0; i < s.n_rows * s.row_width; ++i)
    out[i] = akv::f32_to_bf16((i % 7 == 3 ? 8.0f : 1.0f) * noise(rng));
  return raw;
}

struct Agent {
  std::vector<akv::RestoreJob::Block> blocks;  // chain order
};

// Writes `n` chained blocks (a few distinct payloads) and waits until they are durable.
Agent write_agent(akv::DiskStore& disk, const akv::BlockShape& shape, std::int64_t n) {
  std::vector<std::vector<std::byte>> payloads;
  for (std::uint32_t i = 0; i < 4; ++i) payloads.push_back(kv_like_block(shape, i + 1));
  Agent a;
  akv::Hash128 parent{0, 1};
  for (std::int64_t i = 0; i < n; ++i) {
    const akv::Hash128 key{static_cast<std::uint64_t>(i) + 1, 0x5eed};
    const akv::Hash128 tokens{static_cast<std::uint64_t>(i) + 1, 0x70c5};
    std::vector<std::byte> raw = disk.take_raw_buffer();
    raw.assign(payloads[static_cast<std::size_t>(i) % payloads.size()].begin(),
               payloads[static_cast<std::size_t>(i) % payloads.size()].end());
    AKV_CHECK(
        disk.put_or_wait(key, parent, tokens, std::move(raw), Clock::now() + std::chrono::hours(1)),
        "put_or_wait");
    a.blocks.push_back({.key = key,
                        .parent = parent,
                        .tokens_hash = tokens,
                        .depth = static_cast<std::int32_t>(i)});
    parent = key;
  }
  disk.flush();
  return a;
}

struct Timed {
  double wall_s = 0, cpu_s = 0;  // cpu: the process's user + system time (all threads)
};

// Time for a Restorer of `n_threads` to load the whole agent (into `host` when given).
Timed restore_time(akv::DiskStore& disk, akv::HostStore* host, const Agent& a, std::size_t raw_bytes,
                 int n_threads, bool device_decodes) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  akv::Restorer restorer(
      &disk,
      [&] {
        std::lock_guard lock(mu);
        done = true;
        cv.notify_all();
      },
      std::size_t{64} << 30, n_threads, host, device_decodes);
  auto job = std::make_shared<akv::RestoreJob>(a.blocks, raw_bytes);
  const double cpu0 = akv::bench::process_cpu_seconds();
  const auto t0 = Clock::now();
  restorer.submit(job);
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done; });
  }
  const Timed t{.wall_s = seconds_since(t0), .cpu_s = akv::bench::process_cpu_seconds() - cpu0};
  AKV_CHECK(job->n_loaded() == static_cast<std::int32_t>(a.blocks.size()),
            "every block loaded (" + std::to_string(job->n_loaded()) + ")");
  return t;
}

// Seconds to pread every block file whole on `n_threads` threads (no verification): the ceiling.
double pread_s(const std::string& dir, const Agent& a, int n_threads) {
  std::atomic<std::size_t> next{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < n_threads; ++t)
    threads.emplace_back([&] {
      std::vector<std::byte> buf;
      for (std::size_t i = next++; i < a.blocks.size(); i = next++) {
        const std::string path = dir + "/blocks/" + a.blocks[i].key.hex() + ".kvb";
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        AKV_CHECK(fd >= 0, "open " + path);
        buf.resize(static_cast<std::size_t>(::lseek(fd, 0, SEEK_END)));
        std::size_t done = 0;
        while (done < buf.size()) {
          const ssize_t r =
              ::pread(fd, buf.data() + done, buf.size() - done, static_cast<off_t>(done));
          AKV_CHECK(r > 0, "pread " + path);
          done += static_cast<std::size_t>(r);
        }
        ::close(fd);
      }
    });
  for (std::thread& t : threads) t.join();
  return seconds_since(t0);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"disk tier restore after a restart: host-slot load GB/s, files in the page cache"};
  std::string dir = "disk_restore_bench.tmp";
  std::int64_t n_blocks = 1024;
  std::int64_t n_layers = 32;
  std::vector<std::string> codecs = {"native", "int8"};
  std::string host_codec = "native";
  std::vector<int> threads = {1, akv::Restorer::default_threads()};
  int rounds = 3;
  bool into_host = true;
  std::vector<int> device_decodes = {0, 1};
  app.add_option("--dir", dir, "scratch directory (removed after)");
  app.add_option("--blocks", n_blocks, "blocks of 16 tokens (1,024: a 16K-token agent)")
      ->capture_default_str();
  app.add_option("--layers", n_layers, "layers (32: 2 MiB bf16 blocks of the 8B shape)")
      ->capture_default_str();
  app.add_option("--codecs", codecs, "disk codecs to measure")->capture_default_str();
  app.add_option("--host-codec", host_codec, "the host tier's codec")->capture_default_str();
  app.add_option("--threads", threads, "restorer threads")->capture_default_str();
  app.add_option("--rounds", rounds, "timed rounds (median)")->capture_default_str();
  app.add_option("--host", into_host, "load into host-tier slots (else the job's buffers)")
      ->capture_default_str();
  app.add_option(
         "--device-decodes", device_decodes,
         "0: the restorer decodes a compact disk codec into the host codec on the CPU; 1: it keeps "
         "the disk's codec in the slot (a GPU server: the device decodes)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const akv::BlockShape shape{.n_rows = 2 * n_layers * 16,
                              .row_width = 8 * 128,
                              .dtype = akv::DType::BF16,
                              .block_size = 16};
  const std::size_t raw = shape.raw_bytes();
  const std::optional<akv::SpillCodec> hc = akv::find_spill_codec(host_codec);
  AKV_CHECK(hc.has_value(), "--host-codec: unknown codec " + host_codec);
  std::printf("%lld blocks of %.2f MiB raw (%.2f GB), host tier %s, %u hardware threads\n",
              static_cast<long long>(n_blocks), static_cast<double>(raw) / (1 << 20),
              static_cast<double>(raw * static_cast<std::size_t>(n_blocks)) / 1e9,
              host_codec.c_str(), std::thread::hardware_concurrency());
  std::printf(
      "| disk codec | in the slot | file GB | threads | pread only GB/s | restore GB/s of file | "
      "GB/s of raw | ms | CPU s per GB of raw |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& name : codecs) {
    const std::optional<akv::SpillCodec> codec = akv::find_spill_codec(name);
    AKV_CHECK(codec.has_value(), "--codecs: unknown codec " + name);
    std::filesystem::remove_all(dir);
    akv::DiskStoreOptions o;
    o.dir = dir;
    o.fingerprint = {3, 4};
    o.codec = *codec;
    o.shape = shape;
    o.block_size = 16;
    Agent agent;
    {
      auto disk = akv::DiskStore::open_or_throw(o);
      agent = write_agent(*disk, shape, n_blocks);
    }
    auto disk = akv::DiskStore::open_or_throw(o);  // a restart: the files are in the page cache
    const double file_gb = static_cast<double>(disk->stats().bytes) / 1e9;
    for (const int keep : device_decodes) {
      // Keeping the disk's codec matters only where it differs from the host tier's.
      if (keep != device_decodes.front() && *codec == *hc) continue;
      const bool kept = keep != 0 && into_host && *codec != *hc;
      for (const int n_threads : threads) {
        std::unique_ptr<akv::HostStore> host;
        if (into_host) {
          akv::HostStoreOptions h;
          h.max_bytes = akv::encoded_bytes(*hc, shape) * static_cast<std::size_t>(n_blocks);
          h.codec = *hc;
          h.shape = shape;
          h.block_size = 16;
          host = std::make_unique<akv::HostStore>(std::move(h));
        }
        std::vector<double> restore, cpu, preads;
        for (int r = 0; r <= rounds; ++r) {  // round 0 warms (faults the host slots in)
          if (host != nullptr)
            for (const auto& b : agent.blocks) host->erase(b.key);
          const Timed t = restore_time(*disk, host.get(), agent, raw, n_threads, keep != 0);
          const double p = pread_s(dir, agent, n_threads);
          if (r == 0) continue;
          restore.push_back(t.wall_s);
          cpu.push_back(t.cpu_s);
          preads.push_back(p);
        }
        const double s = median(restore);
        const double raw_gb = static_cast<double>(raw * static_cast<std::size_t>(n_blocks)) / 1e9;
        std::printf("| %s | %s | %.2f | %d | %.1f | %.1f | %.1f | %.0f | %.3f |\n", name.c_str(),
                    kept ? name.c_str() : (into_host ? host_codec.c_str() : "raw buffer"), file_gb,
                    n_threads, file_gb / median(preads), file_gb / s, raw_gb / s, s * 1e3,
                    median(cpu) / raw_gb);
      }
    }
  }
  std::filesystem::remove_all(dir);
  return 0;
}
