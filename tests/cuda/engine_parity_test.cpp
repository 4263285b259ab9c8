// The engine on the CUDA backend against the reference: a prompt, the same prompt again (a hot
// prefix hit whose last block is copied on write and only the last token computed), and the
// next turn (prompt + reply + new tokens). Every request's greedy tokens must equal the tokens
// of the prompt run alone on the CPU reference. Skips itself without a GPU.
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

TEST(CudaEngine, ColdHotAndNextTurnMatchTheReference) {
  AKV_SKIP_WITHOUT_CUDA();
  check_turns(testdata_dir() + "/models/stories260K/hf");
  check_turns(testdata_dir() + "/models/tiny-random/llama3-rope-scaled");
  check_turns(testdata_dir() + "/models/tiny-random/qwen3-qknorm-tied");
}

}  // namespace
}  // namespace akv::test
