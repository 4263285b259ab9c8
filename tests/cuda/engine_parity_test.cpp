// The engine on the CUDA backend against the reference: a prompt, the same prompt again (a hot
// prefix hit whose last block is copied on write and only the last token computed), and the
// next turn (prompt + reply + new tokens). Every request's greedy tokens must equal the tokens
// of the prompt run alone on the CPU reference. Greedy steps pick their ids on the GPU; a batch
// of eight checks them against the logits path too, and so does a batch of seeded temperature-1
// requests whose ids are drawn on the GPU (checked against the reference token by token, since a
// draw may flip where rounding moves a boundary). Skips itself without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "../engine/engine_test_util.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "models/sequence_runner.h"
#include "parity_util.h"

namespace akv::test {
namespace {

Ids random_prompt(std::uint32_t seed, int n, std::int64_t vocab) {
  std::mt19937 g(seed);
  Ids ids(static_cast<std::size_t>(n));
  for (auto& t : ids) t = std::uniform_int_distribution<int>(3, static_cast<int>(std::min<std::int64_t>(vocab, 500)) - 1)(g);
  return ids;
}

void check_turns(const std::string& dir, DType kv_dtype) {
  CudaBackend& gpu = backends().gpu;
  auto model = load_model(dir, gpu);
  const std::int64_t vocab = model->config().vocab_size;
  EngineConfig cfg{.block_size = 16,
                   .n_blocks = 64,
                   .kv_dtype = kv_dtype,
                   .scheduler = {.max_batch_tokens = 64, .max_prefill_chunk = 32}};
  Engine engine(std::move(model), gpu, cfg);
  Collector out;
  auto run = [&](const Ids& prompt) {
    GenerateRequest r;
    r.prompt = prompt;
    r.max_tokens = 8;
    return out.wait(engine.submit(std::move(r), out.callback()));
  };
  Ids prompt = random_prompt(11, 90, vocab);  // + 8 generated: 6 full blocks indexed
  const auto first = run(prompt);
  EXPECT_EQ(first.tokens, greedy_alone(dir, prompt, 8, kv_dtype)) << dir << ": cold";
  const auto again = run(prompt);
  EXPECT_EQ(again.usage.cached_tokens, 89) << dir;  // 5 blocks shared, 9 tokens copied on write
  EXPECT_EQ(again.tokens, first.tokens) << dir << ": hot, last block copied";
  prompt.insert(prompt.end(), first.tokens.begin(), first.tokens.end());
  for (int t : random_prompt(12, 5, vocab)) prompt.push_back(t);
  const auto next = run(prompt);
  EXPECT_EQ(next.tokens, greedy_alone(dir, prompt, 8, kv_dtype)) << dir << ": next turn";
}

// The prompts decoding together (10 tokens each) in one engine on the GPU, n_logprobs and
// sampling(i) per request; the results in prompt order.
template <typename Sampling>
std::vector<Collector::Result> run_batched_on_gpu(const std::string& dir, const std::vector<Ids>& prompts,
                                                  std::int32_t n_logprobs, Sampling sampling) {
  CudaBackend& gpu = backends().gpu;
  EngineConfig cfg{.block_size = 16, .n_blocks = 64, .scheduler = {.max_batch_tokens = 128, .max_prefill_chunk = 64}};
  Engine engine(load_model(dir, gpu), gpu, cfg);
  Collector out;
  std::vector<RequestId> ids;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest r;
    r.prompt = prompts[i];
    r.max_tokens = 10;
    r.n_logprobs = n_logprobs;
    r.sampling = sampling(i);
    ids.push_back(engine.submit(std::move(r), out.callback()));
  }
  std::vector<Collector::Result> results;
  for (RequestId id : ids) results.push_back(out.wait(id));
  return results;
}

// Eight greedy requests decoding together as recorded steps: ids picked on the GPU (only ids
// copied back) give the tokens of the logits path (a request with logprobs in every batch) and
// of the CPU reference.
void check_greedy_ids(const std::string& dir) {
  CudaBackend& gpu = backends().gpu;
  std::vector<Ids> prompts;
  for (std::uint32_t i = 0; i < 8; ++i) prompts.push_back(random_prompt(30 + i, 5 + 7 * static_cast<int>(i), 500));
  auto run = [&](std::int32_t n_logprobs) {
    return run_batched_on_gpu(dir, prompts, n_logprobs, [](std::size_t) { return SamplingParams{}; });
  };
  const CudaBackend::StepStats before = gpu.step_stats();
  const auto picked = run(0);
  const CudaBackend::StepStats mid = gpu.step_stats();
  const auto logits = run(1);
  EXPECT_GE(mid.replayed - before.replayed, 4) << dir << ": greedy-id steps were recorded and replayed";
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(picked[i].tokens, logits[i].tokens) << dir << ": prompt " << i;
    EXPECT_EQ(picked[i].tokens, greedy_alone(dir, prompts[i], 10)) << dir << ": prompt " << i;
    ASSERT_FALSE(picked[i].logprobs.empty());
    EXPECT_TRUE(std::isnan(picked[i].logprobs.back())) << "the ids path was taken";
  }
}

// Counts the tokens of a seeded temperature-1 request that the CPU reference, teacher-forced on
// prompt + `tokens` and drawing with the request's uniforms (a Sampler of the same seed), would
// not draw. GPU and CPU logits differ by rounding, so a draw may flip where its target lies near
// a boundary: such a token is allowed when the target is within 1e-4 of the total weight of the
// token's interval; any other is a failure.
int reference_flips(const std::string& dir, const Ids& prompt, std::uint64_t seed, const Ids& tokens) {
  ReferenceBackend ref;
  auto model = load_model(dir, ref);
  const std::int32_t vocab = static_cast<std::int32_t>(model->config().vocab_size);
  SequenceRunner runner(*model, ref, static_cast<std::int64_t>(prompt.size() + tokens.size()));
  Sampler sampler({.temperature = 1.0f, .seed = seed}, vocab, 0, prompt);
  std::span<const float> logits = runner.append(prompt);
  int flips = 0;
  for (std::size_t k = 0; k < tokens.size(); ++k) {
    const double u = sampler.draw_uniform();
    const std::int32_t got = tokens[k], want = draw_row(logits, 1.0f, u);
    sampler.take_drawn(got);
    if (got != want) {
      double max = logits[0], before = 0.0, total = 0.0;
      for (float l : logits) max = std::max(max, static_cast<double>(l));
      for (std::int32_t i = 0; i < vocab; ++i) {
        const double w = std::exp(static_cast<double>(logits[i]) - max);
        if (i < got) before += w;
        total += w;
      }
      const double target = u * total, tol = 1e-4 * total, w = std::exp(static_cast<double>(logits[got]) - max);
      EXPECT_TRUE(target >= before - tol && target < before + w + tol)
          << dir << ": token " << k << " is " << got << ", the reference draws " << want << " (u " << u << ")";
      std::printf("%s: token %zu drawn %d, reference %d (u %.9f): within 1e-4 of a boundary\n", dir.c_str(), k, got,
                  want, u);
      ++flips;
    }
    if (k + 1 < tokens.size()) logits = runner.append(std::span<const std::int32_t>(&tokens[k], 1));
  }
  return flips;
}

// Eight seeded temperature-1 requests decoding together: ids drawn on the GPU (sample_rows in
// recorded steps) give the tokens of the GPU logits path (a request with logprobs in every
// batch: draw_row on the host), but for draws at a boundary. Against the CPU reference the GPU's
// logits differ by rounding, so those tokens are checked one by one, teacher-forced
// (reference_flips).
void check_sampled_ids(const std::string& dir) {
  CudaBackend& gpu = backends().gpu;
  std::vector<Ids> prompts;
  for (std::uint32_t i = 0; i < 8; ++i) prompts.push_back(random_prompt(50 + i, 4 + 6 * static_cast<int>(i), 500));
  auto seed = [](std::size_t i) { return std::uint64_t{1000} + i; };
  auto run = [&](std::int32_t n_logprobs) {
    return run_batched_on_gpu(dir, prompts, n_logprobs,
                              [&](std::size_t i) { return SamplingParams{.temperature = 1.0f, .seed = seed(i)}; });
  };
  const CudaBackend::StepStats before = gpu.step_stats();
  const auto drawn = run(0);
  const CudaBackend::StepStats mid = gpu.step_stats();
  const auto logits = run(1);
  EXPECT_GE(mid.replayed - before.replayed, 4) << dir << ": sampled-id steps were recorded and replayed";
  // The two runs need not batch their prefills alike (requests arrive while the engine steps),
  // so their logits may differ by rounding and a draw near a boundary may differ between them:
  // each path's tokens are checked against the reference, and they must agree elsewhere.
  int flips = 0, differ = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_FALSE(drawn[i].logprobs.empty());
    EXPECT_TRUE(std::isnan(drawn[i].logprobs.back())) << "the ids path was taken";
    flips += reference_flips(dir, prompts[i], seed(i), drawn[i].tokens);
    if (drawn[i].tokens != logits[i].tokens) {
      ++differ;
      flips += reference_flips(dir, prompts[i], seed(i), logits[i].tokens);
    }
  }
  EXPECT_LE(differ, 1) << dir << ": the ids and logits paths differ in more prompts than rounding explains";
  EXPECT_LE(flips, 3) << dir << ": more near-boundary flips against the reference than rounding explains";
}

TEST(CudaEngine, SampledIdsOnTheGpuMatchTheLogitsPathAndTheReference) {
  AKV_SKIP_WITHOUT_CUDA();
  check_sampled_ids(testdata_dir() + "/models/stories260K/hf");
  check_sampled_ids(testdata_dir() + "/models/tiny-random/llama3-rope-scaled");
  check_sampled_ids(testdata_dir() + "/models/tiny-random/qwen3-qknorm-tied");
}

TEST(CudaEngine, GreedyIdsOnTheGpuMatchTheLogitsPathAndTheReference) {
  AKV_SKIP_WITHOUT_CUDA();
  check_greedy_ids(testdata_dir() + "/models/stories260K/hf");
  check_greedy_ids(testdata_dir() + "/models/tiny-random/llama3-rope-scaled");
  check_greedy_ids(testdata_dir() + "/models/tiny-random/qwen3-qknorm-tied");
}

TEST(CudaEngine, ColdHotAndNextTurnMatchTheReference) {
  AKV_SKIP_WITHOUT_CUDA();
  check_turns(testdata_dir() + "/models/stories260K/hf", DType::F32);
  check_turns(testdata_dir() + "/models/tiny-random/llama3-rope-scaled", DType::F32);
  check_turns(testdata_dir() + "/models/tiny-random/qwen3-qknorm-tied", DType::F32);
}

// The KV dtype `serve` allocates on the GPU (preferred_kv_dtype: BF16): chunked prefill against
// cached blocks, copy-on-write, decode and graphs on it give the reference's tokens with the
// same KV rounding.
TEST(CudaEngine, ColdHotAndNextTurnMatchTheReferenceWithTheServedKvDtype) {
  AKV_SKIP_WITHOUT_CUDA();
  const DType kv = backends().gpu.preferred_kv_dtype();
  ASSERT_EQ(kv, DType::BF16);
  check_turns(testdata_dir() + "/models/stories260K/hf", kv);
  check_turns(testdata_dir() + "/models/tiny-random/llama3-rope-scaled", kv);
  check_turns(testdata_dir() + "/models/tiny-random/qwen3-qknorm-tied", kv);
}

}  // namespace
}  // namespace akv::test
