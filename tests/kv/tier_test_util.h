// Helpers for the disk-tier tests: a scratch directory and deterministic block contents.
#pragma once

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kv/block_codec.h"
#include "kv/block_key.h"

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

}  // namespace akv::test
