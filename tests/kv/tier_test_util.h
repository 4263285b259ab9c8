// Helpers for the disk-tier tests: a scratch directory and deterministic block contents.
#pragma once

#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kv/block_codec.h"
#include "kv/block_key.h"
#include "kv/kv_manager.h"
#include "tensor/dtype.h"

namespace akv::test {

// A fresh directory under the system temp dir, removed by the destructor.
struct ScratchDir {
  ScratchDir() {
    path = (std::filesystem::temp_directory_path() /
            ("akv_kv_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++)))
               .string();
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::string path;
};

// Raw bytes of a block of F32 values derived from `seed` (so a key's content can be checked).
inline std::vector<std::byte> block_content(const BlockShape& s, std::uint64_t seed) {
  std::vector<std::byte> raw(s.raw_bytes());
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.5f);
  for (std::size_t i = 0; i + 4 <= raw.size(); i += 4) {
    const float f = d(rng);
    std::memcpy(raw.data() + i, &f, 4);
  }
  return raw;
}

// Holds a disk store's IO thread (DiskStoreOptions::before_write calls wait()) until opened: a
// busy disk. wait_entered() returns once the thread is held; close() holds the next batch again.
struct Gate {
  void wait() {
    std::unique_lock lock(mu);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
  }
  void wait_entered() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return entered; });
  }
  void release() {
    {
      std::lock_guard lock(mu);
      open = true;
    }
    cv.notify_all();
  }
  void close() {
    std::lock_guard lock(mu);
    open = entered = false;
  }
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, open = false;
};

// `f` as the raw bytes of a `t` tensor (bf16 and f16 rounded to nearest even).
inline std::vector<std::byte> raw_from_floats(std::span<const float> f, DType t) {
  std::vector<std::byte> raw(f.size() * dtype_size(t));
  for (std::size_t i = 0; i < f.size(); ++i) {
    if (t == DType::F32) {
      std::memcpy(raw.data() + 4 * i, &f[i], 4);
      continue;
    }
    const std::uint16_t h = t == DType::BF16 ? f32_to_bf16(f[i]) : f32_to_f16(f[i]);
    std::memcpy(raw.data() + 2 * i, &h, 2);
  }
  return raw;
}

// KvBlockIo's read and write over an in-memory "device": mem[b] holds block b's raw bytes
// (`mem` outlives the io).
inline KvBlockIo memory_block_io(std::vector<std::vector<std::byte>>& mem,
                                 std::size_t block_bytes) {
  return {.read =
              [&mem](BlockId b, std::span<std::byte> out) {
                std::memcpy(out.data(), mem[b].data(), out.size());
              },
          .write =
              [&mem](BlockId b, std::span<const std::byte> in) {
                std::memcpy(mem[b].data(), in.data(), in.size());
              },
          .block_bytes = block_bytes};
}

}  // namespace akv::test
