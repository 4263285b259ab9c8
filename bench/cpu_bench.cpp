// CPU decode and prefill speed of the fast backend, with the machine's limits measured in the
// same run: memory read bandwidth (bounds batch-1 decode, which streams every weight once per
// token) and the OpenBLAS sgemm rate on the prefill's shapes (bounds prefill).
//   cpu_bench MODEL_DIR... [--threads N] [--prompt 512] [--decode 128] [--repeat 3]
// Every figure is the best of --repeat runs (other work on the machine only slows runs down).
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/fast_backend.h"
#include "bench_util.h"
#include "models/model.h"
#include "tensor/safetensors.h"

namespace akv {
namespace {

using bench::Clock;
using bench::seconds_since;

template <typename Fn>
double best_seconds(int repeat, const Fn& fn) {
  double best = 1e30;
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

// Read bandwidth, bytes/s: every thread sums its slice of a buffer far larger than the caches.
double measure_read_bandwidth(ThreadPool& pool, const Kernels& k, int repeat) {
  std::vector<float> buf(std::size_t{256} << 20, 1.0f);  // 1 GiB
  std::vector<double> sums(static_cast<std::size_t>(pool.n_threads()));
  const double s = best_seconds(repeat, [&] {
    run_per_thread(pool, [&](int t) {
      std::int64_t b, e;
      split_range(static_cast<std::int64_t>(buf.size()), pool.n_threads(), t, 4096, b, e);
      sums[t] = k.sum_squares(buf.data() + b, e - b);
    });
  });
  double total = 0;
  for (double v : sums) total += v;
  if (total != static_cast<double>(buf.size())) std::printf("  (bandwidth check sum off: %g)\n", total);
  return static_cast<double>(buf.size() * sizeof(float)) / s;
}

// The matmuls of one transformer layer over `tokens` rows: {n_out, n_in} per weight.
std::vector<std::pair<std::int64_t, std::int64_t>> layer_shapes(const ModelConfig& c) {
  const std::int64_t q = c.n_heads * c.head_dim, kv = c.n_kv_heads * c.head_dim;
  return {{q, c.hidden_size}, {kv, c.hidden_size}, {kv, c.hidden_size}, {c.hidden_size, q},
          {c.intermediate_size, c.hidden_size}, {c.intermediate_size, c.hidden_size},
          {c.hidden_size, c.intermediate_size}};
}

// sgemm FLOP/s on one layer's matmul shapes with `tokens` rows, OpenBLAS on `threads` threads.
double measure_sgemm_rate(const ModelConfig& c, std::int64_t tokens, int threads, int repeat) {
  openblas_set_num_threads(threads);
  const auto shapes = layer_shapes(c);
  std::int64_t max_in = 0, max_out = 0;
  double flops = 0;
  for (auto [n_out, n_in] : shapes) {
    max_in = std::max(max_in, n_in);
    max_out = std::max(max_out, n_out);
    flops += 2.0 * static_cast<double>(tokens * n_out * n_in);
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(tokens * max_in), w(max_out * max_in), y(tokens * max_out);
  for (float& v : x) v = u(rng);
  for (float& v : w) v = u(rng);
  const double s = best_seconds(repeat + 2, [&] {
    for (auto [n_out, n_in] : shapes)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(tokens), int(n_out), int(n_in), 1.0f,
                  x.data(), int(n_in), w.data(), int(n_in), 0.0f, y.data(), int(n_out));
  });
  openblas_set_num_threads(1);
  return flops / s;
}

struct ModelBytes {
  double read_per_token = 0;  // weights a decode step streams (the embedding table only as lm_head)
  double params = 0;
  DType dtype = DType::F32;
};

ModelBytes model_bytes(const std::string& dir, const ModelConfig& c) {
  const SafetensorsReader r = SafetensorsReader::open_or_throw(dir);
  ModelBytes m;
  for (const std::string& name : r.names()) {
    const TensorInfo& t = r.get_or_throw(name);
    m.params += static_cast<double>(t.numel());
    const bool unread_table = name == "model.embed_tokens.weight" && r.find("lm_head.weight") != nullptr;
    m.read_per_token += unread_table ? static_cast<double>(t.bytes.size()) / static_cast<double>(c.vocab_size)
                                     : static_cast<double>(t.bytes.size());
    if (name == "model.embed_tokens.weight") m.dtype = t.dtype;
  }
  return m;
}

// One sequence of up to `capacity` positions in identity-mapped blocks.
struct Sequence {
  std::vector<std::int32_t> table;
  KvStorage kv;
  Sequence(Backend& b, const ModelConfig& c, std::int64_t capacity) {
    const std::int64_t block = 16, n_blocks = (capacity + block - 1) / block;
    kv = b.alloc_kv(kv_layout_for(c, n_blocks, block, b.preferred_kv_dtype()));
    for (std::int32_t i = 0; i < n_blocks; ++i) table.push_back(i);
  }
  // Runs ids at positions [start, start + n) and writes the last row's logits.
  void forward(Model& model, std::span<const std::int32_t> ids, std::int32_t start, std::span<float> logits) {
    const SequenceChunk chunk{0, static_cast<std::int32_t>(ids.size()), start, table};
    const std::vector<std::int32_t> pos = positions_for({&chunk, 1});
    const std::int32_t last = chunk.n_tokens - 1;
    model.forward({ids, pos, {&chunk, 1}, {&last, 1}}, kv, logits);
  }
};

std::int32_t argmax(std::span<const float> v) {
  return static_cast<std::int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Prefill of n_prompt random tokens in one forward pass (logits of the last row only, as
// generation does). Returns tokens/s and the matmul FLOPs per token (attention not counted).
void bench_prefill(const std::string& dir, FastBackend& backend, std::int64_t n_prompt, int repeat,
                   double& tokens_per_s, double& flops_per_token) {
  auto model = load_model(dir, backend);
  const ModelConfig& c = model->config();
  Sequence seq(backend, c, n_prompt);
  std::vector<float> logits(c.vocab_size);
  std::mt19937 rng(7);
  std::vector<std::int32_t> prompt(n_prompt);
  for (auto& id : prompt) id = static_cast<std::int32_t>(rng() % c.vocab_size);
  seq.forward(*model, prompt, 0, logits);  // warm-up: pages the weights in
  const double s = best_seconds(repeat, [&] { seq.forward(*model, prompt, 0, logits); });
  double flops = 0;
  for (auto [n_out, n_in] : layer_shapes(c)) flops += 2.0 * double(n_out * n_in);
  flops = flops * double(c.n_layers) * double(n_prompt) + 2.0 * double(c.vocab_size * c.hidden_size);
  tokens_per_s = double(n_prompt) / s;
  flops_per_token = flops / double(n_prompt);
}

// Greedy decode steps after a short prompt (its prefill is outside the timed region).
void bench_decode(const std::string& dir, FastBackend& backend, std::int64_t n_decode, int repeat,
                  double& tokens_per_s, double& bytes_per_token) {
  auto model = load_model(dir, backend);
  const ModelConfig& c = model->config();
  const ModelBytes mb = model_bytes(dir, c);
  const std::int64_t n_short = 32;
  Sequence seq(backend, c, n_short + n_decode);
  std::vector<float> logits(c.vocab_size);
  std::vector<std::int32_t> prompt(n_short);
  for (std::int64_t i = 0; i < n_short; ++i) prompt[i] = static_cast<std::int32_t>((i * 7919) % c.vocab_size);
  double best = 1e30;
  for (int r = 0; r < repeat + 1; ++r) {  // the first run pages the weights in
    seq.forward(*model, prompt, 0, logits);
    const auto t0 = Clock::now();
    std::int32_t next = argmax(logits);
    for (std::int64_t i = 0; i < n_decode; ++i) {
      seq.forward(*model, {&next, 1}, static_cast<std::int32_t>(n_short + i), logits);
      next = argmax(logits);
    }
    if (r > 0) best = std::min(best, seconds_since(t0));
  }
  // Every weight once (the tied embedding table as the lm_head) plus the K/V rows attention
  // reads, averaged over the steps.
  const double kv_bytes =
      2.0 * double(c.n_layers * c.n_kv_heads * c.head_dim * 4) * (double(n_short) + double(n_decode) / 2);
  tokens_per_s = double(n_decode) / best;
  bytes_per_token = mb.read_per_token + kv_bytes;
}

}  // namespace
}  // namespace akv

int main(int argc, char** argv) {
  using namespace akv;
  CLI::App app{"CPU decode/prefill benchmark against measured bandwidth and sgemm rate"};
  std::vector<std::string> dirs;
  int threads = 0, repeat = 3, spin = FastBackend::kSpinMicros;
  std::int64_t n_prompt = 512, n_decode = 128;
  app.add_option("models", dirs, "model directories (config.json + safetensors)")->required();
  app.add_option("--threads", threads, "threads (0: one per hardware thread)");
  app.add_option("--prompt", n_prompt, "prefill tokens");
  app.add_option("--decode", n_decode, "decode steps");
  app.add_option("--repeat", repeat, "runs per measurement (best is reported)");
  app.add_option("--spin-us", spin, "thread pool polling before sleeping, microseconds");
  CLI11_PARSE(app, argc, argv);

  FastBackend backend(threads, best_isa(), spin);
  ThreadPool pool(threads);
  // The limits are measured before and after the model runs and the higher values kept, so a
  // burst of other work on the machine during one measurement cannot flatter the ratios.
  const auto measure_limits = [&](double& bandwidth, double& gemm_rate) {
    bandwidth = std::max(bandwidth, measure_read_bandwidth(pool, kernels_for(backend.isa()), repeat + 2));
    for (const std::string& dir : dirs) {
      auto probe = load_model(dir, backend);
      gemm_rate = std::max(gemm_rate, measure_sgemm_rate(probe->config(), n_prompt, backend.n_threads(), repeat));
    }
  };
  double bandwidth = 0, gemm_rate = 0;
  measure_limits(bandwidth, gemm_rate);
  struct Result {
    std::string dir;
    double prefill_tps, prefill_flops, decode_tps, decode_bytes;
  };
  std::vector<Result> results;
  for (const std::string& dir : dirs) {
    Result r{dir, 0, 0, 0, 0};
    bench_prefill(dir, backend, n_prompt, repeat, r.prefill_tps, r.prefill_flops);
    bench_decode(dir, backend, n_decode, repeat, r.decode_tps, r.decode_bytes);
    results.push_back(r);
  }
  measure_limits(bandwidth, gemm_rate);

  std::printf("threads %d (pool spin %d us), kernels %s\n", backend.n_threads(), spin, isa_name(backend.isa()));
  std::printf("memory read bandwidth: %.2f GB/s (1 GiB buffer)\n", bandwidth / 1e9);
  std::printf("sgemm rate: %.1f GFLOP/s (OpenBLAS on %d threads, one layer's matmul shapes x %lld rows)\n",
              gemm_rate / 1e9, backend.n_threads(), static_cast<long long>(n_prompt));
  for (const Result& r : results) {
    std::printf("%s\n", r.dir.c_str());
    std::printf("  prefill %lld tokens: %.1f tok/s, matmuls at %.1f GFLOP/s = %.0f%% of the sgemm rate\n",
                static_cast<long long>(n_prompt), r.prefill_tps, r.prefill_flops * r.prefill_tps / 1e9,
                100.0 * r.prefill_flops * r.prefill_tps / gemm_rate);
    const double bound = bandwidth / r.decode_bytes;
    std::printf("  decode %lld steps: %.2f tok/s (%.2f ms/token); bound %.2f tok/s (%.1f MB/token) -> %.0f%% of bound\n",
                static_cast<long long>(n_decode), r.decode_tps, 1e3 / r.decode_tps, bound, r.decode_bytes / 1e6,
                100.0 * r.decode_tps / bound);
  }
  return 0;
}
