// The engine on the CUDA backend against the reference: a prompt, the same prompt again (a hot
// prefix hit whose last block is copied on write and only the last token computed), and the
// next turn (prompt + reply + new tokens). Every request's greedy tokens must equal the tokens
// of the prompt run alone on the CPU reference. Greedy steps pick their ids on the GPU; a batch
// of eight checks them against the logits path too. Skips itself without a GPU.
#include <cmath>
#include <random>

#include "../engine/engine_test_util.h"
#include "engine/engine.h"
#include "parity_util.h"

namespace akv::test {
namespace {

Ids random_prompt(std::uint32_t seed, int n, std::int64_t vocab) {
  std::mt19937 g(seed);
  Ids ids(static_cast<std::size_t>(n));
  for (auto& t : ids) t = std::uniform_int_distribution<int>(3, static_cast<int>(std::min<std::int64_t>(vocab, 500)) - 1)(g);
  return ids;
}

void check_turns(const std::string& dir) {
  CudaBackend& gpu = backends().gpu;
  auto model = load_model(dir, gpu);
  const std::int64_t vocab = model->config().vocab_size;
  EngineConfig cfg{.block_size = 16, .n_blocks = 64, .scheduler = {.max_batch_tokens = 64, .max_prefill_chunk = 32}};
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
  EXPECT_EQ(first.tokens, greedy_alone(dir, prompt, 8)) << dir << ": cold";
  const auto again = run(prompt);
  EXPECT_EQ(again.usage.cached_tokens, 89) << dir;  // 5 blocks shared, 9 tokens copied on write
  EXPECT_EQ(again.tokens, first.tokens) << dir << ": hot, last block copied";
  prompt.insert(prompt.end(), first.tokens.begin(), first.tokens.end());
  for (int t : random_prompt(12, 5, vocab)) prompt.push_back(t);
  const auto next = run(prompt);
  EXPECT_EQ(next.tokens, greedy_alone(dir, prompt, 8)) << dir << ": next turn";
}

// Eight greedy requests decoding together as recorded steps: ids picked on the GPU (only ids
// copied back) give the tokens of the logits path (a request with logprobs in every batch) and
// of the CPU reference.
void check_greedy_ids(const std::string& dir) {
  CudaBackend& gpu = backends().gpu;
  std::vector<Ids> prompts;
  for (std::uint32_t i = 0; i < 8; ++i) prompts.push_back(random_prompt(30 + i, 5 + 7 * static_cast<int>(i), 500));
  auto run = [&](std::int32_t n_logprobs) {
    auto model = load_model(dir, gpu);
    EngineConfig cfg{.block_size = 16, .n_blocks = 64, .scheduler = {.max_batch_tokens = 128, .max_prefill_chunk = 64}};
    Engine engine(std::move(model), gpu, cfg);
    Collector out;
    std::vector<RequestId> ids;
    for (const Ids& p : prompts) {
      GenerateRequest r;
      r.prompt = p;
      r.max_tokens = 10;
      r.n_logprobs = n_logprobs;
      ids.push_back(engine.submit(std::move(r), out.callback()));
    }
    std::vector<Collector::Result> results;
    for (RequestId id : ids) results.push_back(out.wait(id));
    return results;
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

TEST(CudaEngine, GreedyIdsOnTheGpuMatchTheLogitsPathAndTheReference) {
  AKV_SKIP_WITHOUT_CUDA();
  check_greedy_ids(testdata_dir() + "/models/stories260K/hf");
  check_greedy_ids(testdata_dir() + "/models/tiny-random/llama3-rope-scaled");
  check_greedy_ids(testdata_dir() + "/models/tiny-random/qwen3-qknorm-tied");
}

TEST(CudaEngine, ColdHotAndNextTurnMatchTheReference) {
  AKV_SKIP_WITHOUT_CUDA();
  check_turns(testdata_dir() + "/models/stories260K/hf");
  check_turns(testdata_dir() + "/models/tiny-random/llama3-rope-scaled");
  check_turns(testdata_dir() + "/models/tiny-random/qwen3-qknorm-tied");
}

}  // namespace
}  // namespace akv::test
