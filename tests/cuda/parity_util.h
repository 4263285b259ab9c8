// Helpers for the CUDA parity tests: the same random tensors on the reference and CUDA
// backends, relative-norm comparison, and the test data directory.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <numeric>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/batch.h"
#include "backend/cpu/host_buffer.h"
#include "backend/cpu/reference_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "tensor/safetensors.h"

namespace akv::test {

// AGENTKV_TESTDATA_DIR overrides the compiled-in ../shared/testdata.
inline std::string testdata_dir() {
  const char* env = std::getenv("AGENTKV_TESTDATA_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(AGENTKV_TESTDATA);
}

// ||got - want|| / ||want||; NaN or inf anywhere in `got` gives +inf.
inline double rel_error(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}
inline double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  return rel_error(got, std::vector<double>(want.begin(), want.end()));
}

// Keeps the largest error each test saw; printed when the binary ends (the parity numbers).
inline std::map<std::string, double>& worst_errors() {
  static std::map<std::string, double> m;
  return m;
}
inline double note_error(double err) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = t != nullptr ? std::string(t->test_suite_name()) + "." + t->name() : "?";
  double& w = worst_errors()[name];
  w = std::max(w, err);
  return err;
}
struct PrintWorstErrors : ::testing::Environment {
  void TearDown() override {
    for (const auto& [name, err] : worst_errors()) std::printf("worst relative error %-60s %.3g\n", name.c_str(), err);
  }
};

// One backend pair shared by the tests of a binary (the CUDA context is created once).
struct Backends {
  ReferenceBackend ref;
  CudaBackend gpu;
};
inline Backends& backends() {
  static Backends b;
  return b;
}

#define AKV_SKIP_WITHOUT_CUDA() \
  if (!::akv::CudaBackend::device_available()) GTEST_SKIP() << "no CUDA device"

inline std::mt19937& rng() {
  static std::mt19937 g(std::random_device{}());
  return g;
}

inline std::vector<float> random_floats(std::size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng());
  return v;
}

// An f32 activation [rows, cols] on both backends, optionally a column slice of a wider buffer
// (a strided view, like q out of qkv). `poison` fills the GPU copy with NaN.
struct Pair {
  std::unique_ptr<DeviceBuffer> cpu_buf, gpu_buf;
  TensorRef cpu, gpu;

  static Pair make(std::int64_t rows, std::int64_t cols, std::int64_t pad = 0) {
    Backends& b = backends();
    Pair p;
    p.cpu_buf = b.ref.alloc(DType::F32, rows, cols + pad);
    p.gpu_buf = b.gpu.alloc(DType::F32, rows, cols + pad);
    p.cpu = p.cpu_buf->tensor().cols_slice(pad / 2, cols);
    p.gpu = p.gpu_buf->tensor().cols_slice(pad / 2, cols);
    return p;
  }
  static Pair random(std::int64_t rows, std::int64_t cols, std::int64_t pad = 0, float scale = 1.0f) {
    Pair p = make(rows, cols, pad);
    p.set(random_floats(static_cast<std::size_t>(rows * cols), scale));
    return p;
  }
  void set(const std::vector<float>& v) {
    backends().ref.upload(v, cpu);
    backends().gpu.upload(v, gpu);
  }
  void poison_gpu() {
    backends().gpu.upload(std::vector<float>(static_cast<std::size_t>(gpu.rows * gpu.cols),
                                             std::numeric_limits<float>::quiet_NaN()),
                          gpu);
  }
  std::vector<float> get_cpu() {
    std::vector<float> v(static_cast<std::size_t>(cpu.rows * cpu.cols));
    backends().ref.download(cpu, v);
    return v;
  }
  std::vector<float> get_gpu() {
    std::vector<float> v(static_cast<std::size_t>(gpu.rows * gpu.cols));
    backends().gpu.download(gpu, v);
    return v;
  }
  double error() { return note_error(rel_error(get_gpu(), get_cpu())); }
};

// A weight of `dtype` with random values, on both backends (host bytes kept alive here).
struct WeightPair {
  std::vector<std::uint8_t> bytes;
  TensorInfo info;
  WeightRef cpu, gpu;

  static std::unique_ptr<WeightPair> random(DType dtype, std::int64_t rows, std::int64_t cols, float scale,
                                            bool vector = false) {
    auto w = std::make_unique<WeightPair>();
    const std::vector<float> v = random_floats(static_cast<std::size_t>(rows * cols), scale);
    w->bytes.resize(v.size() * dtype_size(dtype));
    for (std::size_t i = 0; i < v.size(); ++i) store_f32(w->bytes.data(), dtype, static_cast<std::int64_t>(i), v[i]);
    w->info.name = std::string(1, 'w');
    w->info.dtype = dtype;
    w->info.shape = vector ? std::vector<std::int64_t>{cols} : std::vector<std::int64_t>{rows, cols};
    w->info.bytes = w->bytes;
    w->cpu = backends().ref.upload_weight(w->info);
    w->gpu = backends().gpu.upload_weight(w->info);
    return w;
  }
};

// A decode-only batch of n sequences, one token each at position 3, over a one-layer KV pool of
// n blocks: what begin_step records. Owns the arrays `batch` points into (not copyable).
struct DecodeBatch {
  KvLayout layout;
  KvStorage kv;
  std::vector<std::int32_t> tables, tokens, positions;
  std::vector<SequenceChunk> chunks;
  ForwardBatch batch;

  DecodeBatch(CudaBackend& gpu, std::int32_t n)
      : layout{.n_layers = 1, .n_blocks = n, .block_size = 16, .n_kv_heads = 1, .head_dim = 8,
               .dtype = DType::F32},
        kv(gpu.alloc_kv(layout)),
        tables(static_cast<std::size_t>(n)),
        tokens(static_cast<std::size_t>(n)) {
    std::iota(tables.begin(), tables.end(), 0);
    for (std::int32_t i = 0; i < n; ++i)
      chunks.push_back({.first_row = i, .n_tokens = 1, .start_pos = 3, .block_table = {&tables[i], 1}});
    positions = positions_for(chunks);
    batch = {.tokens = tokens, .positions = positions, .sequences = chunks, .logit_rows = {}};
  }
  DecodeBatch(const DecodeBatch&) = delete;
  DecodeBatch& operator=(const DecodeBatch&) = delete;
};

inline double tolerance(DType t) { return t == DType::F32 ? 1e-5 : t == DType::F16 ? 2e-3 : 1e-2; }

}  // namespace akv::test
