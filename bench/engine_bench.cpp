// Engine throughput and decode latency under a long prefill, on CPU (docs/perf/engine.md).
//   engine_bench <model_dir> [--backend fast|reference] [--threads N] [--budget 512] [--chunk 256]
// Phase 1: generated tokens/s with 1, 4 and 16 concurrent sequences (distinct random prompts,
// so no prefix hits). Phase 2: inter-token latency of running decodes, alone and while a long
// prompt is being prefilled in chunks.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <vector>

#include "backend/cpu/fast_backend.h"
#include "backend/cpu/reference_backend.h"
#include "engine/engine.h"

namespace akv {
namespace {

using Clock = std::chrono::steady_clock;

// Token arrival times per request; wait_all() blocks until the given requests finished.
class Recorder {
 public:
  EventCallback callback() {
    return [this](const EngineEvent& e) {
      const auto now = Clock::now();
      std::lock_guard lock(mu_);
      if (e.kind == EventKind::Token) times_[e.request].push_back(now);
      if (e.kind == EventKind::Finished) {
        done_[e.request] = true;
        cv_.notify_all();
      }
    };
  }
  void wait_all(const std::vector<RequestId>& ids) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return std::all_of(ids.begin(), ids.end(), [&](RequestId id) { return done_[id]; }); });
  }
  void wait_tokens(RequestId id, std::size_t n) {
    std::unique_lock lock(mu_);
    while (times_[id].size() < n && !done_[id]) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      lock.lock();
    }
  }
  std::vector<Clock::time_point> times(RequestId id) {
    std::lock_guard lock(mu_);
    return times_[id];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<RequestId, std::vector<Clock::time_point>> times_;
  std::map<RequestId, bool> done_;
};

std::vector<std::int32_t> random_prompt(std::mt19937& rng, int n, std::int64_t vocab) {
  std::vector<std::int32_t> ids(n);
  for (auto& t : ids) t = std::uniform_int_distribution<std::int32_t>(3, static_cast<std::int32_t>(vocab) - 1)(rng);
  return ids;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

GenerateRequest request(std::vector<std::int32_t> prompt, int max_tokens, std::string ns) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ns = std::move(ns);
  return r;
}

// Gaps between consecutive tokens of `ids` whose later token arrived in [from, to].
std::vector<double> gaps_ms(Recorder& rec, const std::vector<RequestId>& ids, Clock::time_point from,
                            Clock::time_point to) {
  std::vector<double> out;
  for (RequestId id : ids) {
    const auto t = rec.times(id);
    for (std::size_t i = 1; i < t.size(); ++i)
      if (t[i] >= from && t[i] <= to) out.push_back(std::chrono::duration<double, std::milli>(t[i] - t[i - 1]).count());
  }
  return out;
}

}  // namespace
}  // namespace akv

int main(int argc, char** argv) {
  using namespace akv;
  CLI::App app("agentkv engine benchmark");
  std::string dir, backend_name = "fast", concurrency = "1,4,16";
  int threads = 0, budget = 512, chunk = 256, prompt_len = 128, gen = 64, long_len = 4096, n_decoders = 4;
  int block_size = 16;
  app.add_option("model_dir", dir)->required();
  app.add_option("--backend", backend_name, "fast | reference");
  app.add_option("--threads", threads, "fast backend threads (0: all)");
  app.add_option("--budget", budget, "tokens per step");
  app.add_option("--chunk", chunk, "prefill chunk per sequence per step");
  app.add_option("--block-size", block_size);
  app.add_option("--concurrency", concurrency, "comma-separated sequence counts");
  app.add_option("--prompt", prompt_len, "prompt tokens per sequence (throughput phase)");
  app.add_option("--gen", gen, "generated tokens per sequence (throughput phase)");
  app.add_option("--long", long_len, "long prompt tokens (latency phase; capped by the context)");
  app.add_option("--decoders", n_decoders, "running decodes during the long prefill");
  CLI11_PARSE(app, argc, argv);

  std::unique_ptr<Backend> backend;
  if (backend_name == "fast") backend = std::make_unique<FastBackend>(threads);
  else backend = std::make_unique<ReferenceBackend>();
  std::vector<int> levels;
  {
    std::stringstream ss(concurrency);
    for (std::string item; std::getline(ss, item, ',');) levels.push_back(std::stoi(item));
  }
  const int max_level = *std::max_element(levels.begin(), levels.end());

  auto model = load_model(dir, *backend);
  const ModelConfig cfg = model->config();
  long_len = static_cast<int>(std::min<std::int64_t>(long_len, cfg.max_position_embeddings - 64));
  const std::int64_t positions =
      std::max<std::int64_t>(std::int64_t{max_level} * (prompt_len + gen), long_len + n_decoders * 256LL) + 1024;
  EngineConfig ec{.block_size = block_size,
                  .n_blocks = static_cast<std::int32_t>((positions + block_size - 1) / block_size),
                  .scheduler = {.max_batch_tokens = budget, .max_prefill_chunk = chunk, .max_running = 64}};
  Engine engine(std::move(model), *backend, ec);
  Recorder rec;
  std::mt19937 rng(1);
  int ns_counter = 0;
  auto fresh_ns = [&] { return "bench-" + std::to_string(ns_counter++); };  // no cross-request hits

  fmt::print("model {} ({} layers, hidden {}, vocab {}), backend {}, budget {} tokens/step, chunk {}, "
             "block {}\n",
             dir, cfg.n_layers, cfg.hidden_size, cfg.vocab_size, backend->name(), budget, chunk, block_size);
  // Warm-up: first-touch of weights and buffers.
  rec.wait_all({engine.submit(request(random_prompt(rng, 32, cfg.vocab_size), 8, fresh_ns()), rec.callback())});

  fmt::print("\n## Throughput ({} prompt tokens, {} generated per sequence)\n", prompt_len, gen);
  fmt::print("| sequences | wall s | generated tok/s | total tok/s | ms/step (mean) |\n|---|---|---|---|---|\n");
  for (int c : levels) {
    const std::uint64_t steps0 = engine.metrics().totals.steps;
    const auto t0 = Clock::now();
    std::vector<RequestId> ids;
    for (int i = 0; i < c; ++i)
      ids.push_back(engine.submit(request(random_prompt(rng, prompt_len, cfg.vocab_size), gen, fresh_ns()), rec.callback()));
    rec.wait_all(ids);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    const std::uint64_t steps = engine.metrics().totals.steps - steps0;
    fmt::print("| {} | {:.2f} | {:.1f} | {:.1f} | {:.1f} |\n", c, s, c * gen / s, c * (gen + prompt_len) / s,
               1000.0 * s / static_cast<double>(std::max<std::uint64_t>(steps, 1)));
  }

  fmt::print("\n## Decode latency with a {}-token prompt prefilling ({} running decodes)\n", long_len, n_decoders);
  std::vector<RequestId> decoders;
  for (int i = 0; i < n_decoders; ++i)
    decoders.push_back(engine.submit(request(random_prompt(rng, 32, cfg.vocab_size), 100000, fresh_ns()), rec.callback()));
  for (RequestId id : decoders) rec.wait_tokens(id, 8);
  const auto base_from = Clock::now();
  rec.wait_tokens(decoders[0], rec.times(decoders[0]).size() + 32);
  const auto long_start = Clock::now();
  const RequestId long_id =
      engine.submit(request(random_prompt(rng, long_len, cfg.vocab_size), 1, fresh_ns()), rec.callback());
  rec.wait_all({long_id});
  const auto long_end = Clock::now();
  for (RequestId id : decoders) engine.cancel(id);
  rec.wait_all(decoders);
  const std::vector<double> base = gaps_ms(rec, decoders, base_from, long_start);
  const std::vector<double> during = gaps_ms(rec, decoders, long_start, long_end);
  fmt::print("| window | gaps | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|\n");
  fmt::print("| decodes only | {} | {:.1f} | {:.1f} | {:.1f} |\n", base.size(), percentile(base, 0.5),
             percentile(base, 0.99), percentile(base, 1.0));
  fmt::print("| during long prefill | {} | {:.1f} | {:.1f} | {:.1f} |\n", during.size(), percentile(during, 0.5),
             percentile(during, 0.99), percentile(during, 1.0));
  fmt::print("long prompt: {} tokens prefilled in {:.2f} s ({:.0f} tok/s) while decoding\n", long_len,
             std::chrono::duration<double>(long_end - long_start).count(),
             long_len / std::chrono::duration<double>(long_end - long_start).count());
  return 0;
}
