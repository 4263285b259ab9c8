// Spill codec throughput on one thread (docs/perf/serving.md, "The disk tier's int8 encode"):
// encode and decode GB/s of raw block bytes for int8 and int4, the vectorised kernels
// (encode_block) against the reference (encode_block_reference), on the block the server uses
// for a llama3-8b-shaped model (32 layers, 8 KV heads x 128, --block-size tokens, bf16 KV).
// With --threads N it also runs the encode on N threads at once and reports their total GB/s.
// With --store-dir DIR it also feeds an int8 DiskStore in DIR (tmpfs keeps the disk out of it)
// native blocks lent as a host tier's write-through lends its slots, as fast as it takes them,
// and reports the GB/s its encode workers (--encode-threads; -1: the server's default) took.
#include <algorithm>
#include <atomic>
#include <cmath>
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

namespace {

using akv::bench::Clock;
using akv::bench::seconds_since;

// KV-like bf16/f16/f32 values: per-channel offsets, every 7th key channel an outlier.
std::vector<std::byte> kv_like_block(const akv::BlockShape& s, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<std::byte> raw(s.raw_bytes());
  const std::size_t esize = akv::dtype_size(s.dtype);
  for (std::int64_t r = 0; r < s.n_rows; ++r) {
    const bool key = r / s.block_size % 2 == 0;
    for (std::int64_t c = 0; c < s.row_width; ++c) {
      const float v =
          key ? 0.5f * static_cast<float>(c % 5) + (c % 7 == 3 ? 25.0f : 1.0f) * noise(rng)
              : noise(rng);
      std::byte* at = raw.data() + static_cast<std::size_t>(r * s.row_width + c) * esize;
      if (s.dtype == akv::DType::F32) {
        std::memcpy(at, &v, 4);
      } else {
        const std::uint16_t h =
            s.dtype == akv::DType::BF16 ? akv::f32_to_bf16(v) : akv::f32_to_f16(v);
        std::memcpy(at, &h, 2);
      }
    }
  }
  return raw;
}

// GB/s of raw bytes of `fn` run on `raw_bytes` blocks for about `seconds`.
template <typename Fn>
double gb_s(std::size_t raw_bytes, double seconds, Fn&& fn) {
  fn();  // warm
  std::int64_t n = 0;
  const auto t0 = Clock::now();
  do {
    fn();
    ++n;
  } while (seconds_since(t0) < seconds);
  return static_cast<double>(raw_bytes) * static_cast<double>(n) / 1e9 / seconds_since(t0);
}

// Total GB/s of encodes on `n_threads` threads at once, each on its own block.
double encode_gb_s_threads(akv::SpillCodec codec, const akv::BlockShape& s, int n_threads,
                           double seconds) {
  std::atomic<std::int64_t> n_done{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  const auto t0 = Clock::now();
  for (int t = 0; t < n_threads; ++t)
    threads.emplace_back([&, t] {
      const std::vector<std::byte> raw = kv_like_block(s, 100 + static_cast<std::uint32_t>(t));
      std::vector<std::byte> enc(akv::encoded_bytes(codec, s));
      while (!stop.load(std::memory_order_relaxed)) {
        akv::encode_block(codec, s, raw, enc);
        n_done.fetch_add(1, std::memory_order_relaxed);
      }
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (std::thread& th : threads) th.join();
  return static_cast<double>(s.raw_bytes()) * static_cast<double>(n_done.load()) / 1e9 /
         seconds_since(t0);
}

// GB/s of raw bytes an int8 DiskStore takes as lent native blocks (n_slots host slots, each
// lent again once released), until the last block is accepted; and once all are written.
void store_intake(const akv::BlockShape& s, const std::string& dir, std::int64_t n_blocks,
                  int encode_threads) {
  std::filesystem::remove_all(dir);
  constexpr std::size_t kSlots = 64;
  std::vector<std::vector<std::byte>> slots;
  for (std::size_t i = 0; i < kSlots; ++i)
    slots.push_back(kv_like_block(s, 200 + static_cast<std::uint32_t>(i)));
  std::mutex mu;
  std::condition_variable freed;
  std::vector<std::size_t> free_slots;
  for (std::size_t i = 0; i < kSlots; ++i) free_slots.push_back(i);
  akv::DiskStoreOptions o;
  o.dir = dir;
  o.fingerprint = {1, 1};
  o.codec = akv::SpillCodec::Int8;
  o.shape = s;
  o.block_size = static_cast<std::int32_t>(s.block_size);
  o.encode_threads = encode_threads;
  o.max_lent_blocks = kSlots;
  auto store = akv::DiskStore::open_or_throw(o);
  const auto t0 = Clock::now();
  for (std::int64_t i = 0; i < n_blocks; ++i) {
    std::size_t slot = 0;
    {
      std::unique_lock lock(mu);
      freed.wait(lock, [&] { return !free_slots.empty(); });
      slot = free_slots.back();
      free_slots.pop_back();
    }
    const akv::LentBlock lent{
        .bytes = slots[slot], .codec = akv::SpillCodec::Native, .release = [&, slot] {
          std::lock_guard lock(mu);
          free_slots.push_back(slot);
          freed.notify_one();
        }};
    const auto k = static_cast<std::uint64_t>(i);
    AKV_CHECK(store->put_lent({k, k + 1}, {}, {}, lent),
              "the store dropped a lent block with room for it");
  }
  const double taken_s = seconds_since(t0);
  store->flush();
  const double written_s = seconds_since(t0);
  const akv::DiskStoreStats st = store->stats();
  const double gb = static_cast<double>(s.raw_bytes()) * static_cast<double>(n_blocks) / 1e9;
  std::printf(
      "store: %lld blocks (%.2f GB raw) taken at %.2f GB/s, written at %.2f GB/s; %d encode "
      "workers, "
      "%.2f s of encode, %lld encoded on the IO thread, %lld dropped\n",
      static_cast<long long>(n_blocks), gb, gb / taken_s, gb / written_s, st.encode_threads,
      static_cast<double>(st.encode_us) / 1e6, static_cast<long long>(st.n_encoded_on_io),
      static_cast<long long>(st.n_dropped));
  store.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"KV spill codec encode/decode throughput"};
  std::int64_t block_size = 16, n_layers = 32, n_kv_heads = 8, head_dim = 128;
  std::string dtype = "bf16";
  double seconds = 1.0;
  int n_threads = 0;
  app.add_option("--block-size", block_size, "tokens per block");
  app.add_option("--layers", n_layers);
  app.add_option("--kv-heads", n_kv_heads);
  app.add_option("--head-dim", head_dim);
  app.add_option("--dtype", dtype, "live KV dtype: bf16, f16, f32");
  app.add_option("--seconds", seconds, "per measurement");
  app.add_option("--threads", n_threads, "also encode on this many threads at once");
  std::string store_dir;
  std::int64_t store_mb = 2048;
  int encode_threads = -1;
  app.add_option("--store-dir", store_dir, "also measure an int8 DiskStore's intake here (tmpfs)");
  app.add_option("--store-mb", store_mb, "raw MiB put into the store");
  app.add_option("--encode-threads", encode_threads, "the store's encode workers (-1: default)");
  CLI11_PARSE(app, argc, argv);

  const akv::DType live = dtype == "f32"   ? akv::DType::F32
                          : dtype == "f16" ? akv::DType::F16
                                           : akv::DType::BF16;
  const akv::BlockShape s{.n_rows = 2 * n_layers * block_size,
                          .row_width = n_kv_heads * head_dim,
                          .dtype = live,
                          .block_size = block_size};
  const std::vector<std::byte> raw = kv_like_block(s, 1);
  std::printf("block: %lld layers x [K,V] x %lld tokens x %lld, %s: %.2f MiB raw; kernels: %s\n",
              static_cast<long long>(n_layers), static_cast<long long>(block_size),
              static_cast<long long>(s.row_width), dtype.c_str(),
              static_cast<double>(s.raw_bytes()) / (1 << 20),
              std::string(akv::codec_kernels_name()).c_str());
  std::printf("%-6s %10s %14s %14s %14s %14s\n", "codec", "ratio", "encode GB/s", "ref encode",
              "decode GB/s", "ref decode");
  for (akv::SpillCodec codec : {akv::SpillCodec::Int8, akv::SpillCodec::Int4}) {
    std::vector<std::byte> enc(akv::encoded_bytes(codec, s)), ref(enc.size()), dec(s.raw_bytes());
    akv::encode_block(codec, s, raw, enc);
    akv::encode_block_reference(codec, s, raw, ref);
    AKV_CHECK(enc == ref, "the vectorised encode differs from the reference");
    const double e = gb_s(s.raw_bytes(), seconds, [&] { akv::encode_block(codec, s, raw, enc); });
    const double er =
        gb_s(s.raw_bytes(), seconds, [&] { akv::encode_block_reference(codec, s, raw, ref); });
    const double d = gb_s(s.raw_bytes(), seconds, [&] { akv::decode_block(codec, s, enc, dec); });
    const double dr =
        gb_s(s.raw_bytes(), seconds, [&] { akv::decode_block_reference(codec, s, enc, dec); });
    std::printf("%-6s %10.3f %14.2f %14.3f %14.2f %14.3f\n",
                std::string(akv::spill_codec_name(codec)).c_str(),
                static_cast<double>(enc.size()) / static_cast<double>(s.raw_bytes()), e, er, d, dr);
    if (n_threads > 0)
      std::printf("       encode on %d threads at once: %.2f GB/s in all\n", n_threads,
                  encode_gb_s_threads(codec, s, n_threads, seconds));
  }
  if (!store_dir.empty())
    store_intake(
        s, store_dir,
        std::max<std::int64_t>(1, (store_mb << 20) / static_cast<std::int64_t>(s.raw_bytes())),
        encode_threads);
  return 0;
}
