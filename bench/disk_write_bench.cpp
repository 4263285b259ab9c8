// Disk tier write-behind against the disk (docs/perf/agent_memory.md, "Disk write-behind"): in
// one run, the sequential write bandwidth (one file, 8 MiB writes, one fdatasync: like
// `dd bs=8M conv=fdatasync`), then for each block size the blocks/s and MB/s of DiskStore
// (batched: put as fast as the queue takes them, until the last block is durable) and of one
// durable file at a time (temp file, fdatasync, rename, directory fsync: the path before batches).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/check.h"
#include "bench_util.h"
#include "kv/disk_store.h"
#include "kv/durable_batch.h"

namespace {

using akv::bench::Clock;
using akv::bench::pattern;
using akv::bench::seconds_since;
using akv::bench::process_cpu_seconds;

// MB/s of one file of `bytes` written in 8 MiB pieces, then fdatasync.
double sequential_mb_s(const std::string& dir, std::size_t bytes) {
  const std::string path = dir + "/sequential.bin";
  const std::vector<std::byte> chunk = pattern(std::size_t{8} << 20, 7);
  const auto t0 = Clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  AKV_CHECK(fd >= 0, "open " + path);
  for (std::size_t done = 0; done < bytes; done += chunk.size())
    AKV_CHECK(::write(fd, chunk.data(), chunk.size()) == static_cast<ssize_t>(chunk.size()),
              "write");
  AKV_CHECK(::fdatasync(fd) == 0, "fdatasync");
  ::close(fd);
  const double s = seconds_since(t0);
  std::filesystem::remove(path);
  return static_cast<double>(bytes) / 1e6 / s;
}

akv::BlockShape shape_of(std::size_t block_bytes) {
  return {.n_rows = static_cast<std::int64_t>(block_bytes / 1024), .row_width = 256,
          .dtype = akv::DType::F32};  // 256 floats = 1 KiB a row
}

struct Rate {
  double blocks_s = 0, mb_s = 0;
  double cpu_us_per_block = 0;  // the process's user + system time
};

// DiskStore's write-behind: n blocks put (waiting for queue room), timed until all are durable.
Rate store_rate(const std::string& dir, std::size_t block_bytes, std::int64_t n) {
  akv::DiskStoreOptions o;
  o.dir = dir + "/store";
  o.fingerprint = {1, 2};
  o.shape = shape_of(block_bytes);
  o.block_size = 16;
  auto store = akv::DiskStore::open_or_throw(o);
  const std::vector<std::byte> content = pattern(block_bytes, 1);
  const auto t0 = Clock::now();
  const double cpu0 = process_cpu_seconds();
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<std::byte> raw = store->take_raw_buffer();
    std::memcpy(raw.data(), content.data(), raw.size());
    const akv::Hash128 key{static_cast<std::uint64_t>(i) + 1, 42};
    AKV_CHECK(store->put_or_wait(key, {}, {}, std::move(raw), Clock::now() + std::chrono::hours(1)),
              "put_or_wait");
  }
  store->flush();
  const double s = seconds_since(t0);
  const double cpu = process_cpu_seconds() - cpu0;
  const akv::DiskStoreStats st = store->stats();
  AKV_CHECK(st.n_written == n, "every block written");
  store.reset();
  std::filesystem::remove_all(o.dir);
  return {.blocks_s = static_cast<double>(n) / s,
          .mb_s = static_cast<double>(st.bytes) / 1e6 / s,
          .cpu_us_per_block = cpu * 1e6 / static_cast<double>(n)};
}

// One durable file at a time (the write path before batches), n files.
Rate one_at_a_time_rate(const std::string& dir, std::size_t block_bytes, std::int64_t n) {
  const std::string sub = dir + "/single";
  std::filesystem::create_directories(sub);
  const int dir_fd = ::open(sub.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  AKV_CHECK(dir_fd >= 0, "open " + sub);
  const std::vector<std::byte> content = pattern(block_bytes, 2);
  std::uint64_t serial = 0;
  const auto t0 = Clock::now();
  for (std::int64_t i = 0; i < n; ++i)
    AKV_CHECK(akv::write_durably(dir_fd, std::to_string(i) + ".kvb", content, {}, serial),
              "write_durably");
  const double s = seconds_since(t0);
  ::close(dir_fd);
  std::filesystem::remove_all(sub);
  return {.blocks_s = static_cast<double>(n) / s,
          .mb_s = static_cast<double>(n) * static_cast<double>(block_bytes) / 1e6 / s};
}

}  // namespace

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  CLI::App app{"disk tier write-behind vs the disk's sequential write bandwidth"};
  std::string dir = "disk_write_bench.tmp";
  std::int64_t total_mb = 1024;
  std::vector<std::int64_t> block_kib = {128, 512, 2048};
  int rounds = 3;
  bool one_at_a_time = true;
  app.add_option("--dir", dir, "scratch directory on the disk to measure (removed after)");
  app.add_option("--total-mb", total_mb, "bytes per measurement")->capture_default_str();
  app.add_option("--block-kib", block_kib, "block sizes")->capture_default_str();
  app.add_option("--rounds", rounds, "rounds (sequential, then each block size); medians")
      ->capture_default_str();
  app.add_option("--one-at-a-time", one_at_a_time, "also time one durable file at a time")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::filesystem::create_directories(dir);
  const std::size_t total = static_cast<std::size_t>(total_mb) << 20;

  // Interleaved rounds: a shared disk's bandwidth drifts, so each round measures the sequential
  // rate next to the block rates.
  std::vector<double> seq;
  std::vector<std::vector<Rate>> store(block_kib.size()), single(block_kib.size());
  for (int round = 0; round < rounds; ++round) {
    seq.push_back(sequential_mb_s(dir, total));
    std::printf("round %d: sequential %.0f MB/s", round + 1, seq.back());
    for (std::size_t b = 0; b < block_kib.size(); ++b) {
      const std::size_t bytes = static_cast<std::size_t>(block_kib[b]) << 10;
      const auto n = static_cast<std::int64_t>(total / bytes);
      store[b].push_back(store_rate(dir, bytes, n));
      std::printf(", %lld KiB %.0f MB/s", static_cast<long long>(block_kib[b]),
                  store[b].back().mb_s);
      if (one_at_a_time)
        single[b].push_back(one_at_a_time_rate(dir, bytes, std::max<std::int64_t>(1, n / 8)));
    }
    std::printf("\n");
  }
  const double seq_mb_s = median(seq);
  std::printf("sequential write (%lld MiB, 8 MiB writes, fdatasync), median of %d: %.0f MB/s\n",
              static_cast<long long>(total_mb), rounds, seq_mb_s);
  std::printf("| block | DiskStore blocks/s | DiskStore MB/s | of sequential | CPU us/block | one at a time MB/s |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (std::size_t b = 0; b < block_kib.size(); ++b) {
    std::vector<double> blocks_s, mb_s, cpu_us, single_mb_s;
    for (const Rate& r : store[b]) {
      blocks_s.push_back(r.blocks_s);
      mb_s.push_back(r.mb_s);
      cpu_us.push_back(r.cpu_us_per_block);
    }
    for (const Rate& r : single[b]) single_mb_s.push_back(r.mb_s);
    const double m = median(mb_s);
    std::printf("| %lld KiB | %.0f | %.0f | %.2f | %.0f | %s |\n",
                static_cast<long long>(block_kib[b]), median(blocks_s), m, m / seq_mb_s,
                median(cpu_us),
                one_at_a_time ? std::to_string(static_cast<int>(median(single_mb_s))).c_str()
                              : "-");
  }
  std::filesystem::remove_all(dir);
  return 0;
}
