// The engine on hybrid linear-attention models (Qwen3.5 text, Qwen3-Next; scalar reference
// backend): each running sequence owns a recurrent-state slot, so batched, chunked and preempted
// runs give exactly the tokens of one sequence run alone; a prompt resumes on its cached KV
// prefix only as far as a state snapshot of the same prefix reaches (the recurrent state is not
// in the KV), and a resumed run gives the tokens of a cold one.
#include <gtest/gtest.h>

#include <random>

#include "engine/engine.h"
#include "engine_test_util.h"

namespace akv {
namespace {

using test::Collector;
using test::greedy_alone;
using test::Ids;

std::string fixture(const std::string& name) {
  return std::string(AGENTKV_TESTDATA) + "/models/tiny-random-w2/" + name;
}

Ids random_ids(std::mt19937& rng, int n) {
  Ids ids(n);
  for (auto& t : ids) t = std::uniform_int_distribution<int>(3, 511)(rng);
  return ids;
}

struct EngineUnderTest {
  EngineUnderTest(const std::string& dir, EngineConfig cfg)
      : engine(load_model(dir, backend), backend, cfg) {}
  RequestId greedy(Ids prompt, int n, std::int32_t n_logprobs = 0) {
    GenerateRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = n;
    r.n_logprobs = n_logprobs;
    return engine.submit(std::move(r), out.callback());
  }
  ReferenceBackend backend;
  Collector out;
  Engine engine;
};

EngineConfig small_steps(std::int32_t n_blocks = 256, std::int32_t snapshot_interval = 1024) {
  return {.block_size = 8,
          .n_blocks = n_blocks,
          .scheduler = {.max_batch_tokens = 24, .max_prefill_chunk = 10, .max_running = 4},
          .state_snapshot_interval = snapshot_interval};
}

class HybridEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(HybridEngine, BatchedChunkedGreedyEqualsEachSequenceRunAlone) {
  const std::string dir = fixture(GetParam());
  std::mt19937 rng(5);
  const std::vector<int> lengths{1, 17, 33, 9, 50, 3};
  std::vector<Ids> prompts;
  for (int len : lengths) prompts.push_back(random_ids(rng, len));
  EngineUnderTest t(dir, small_steps());
  std::vector<RequestId> ids;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    ids.push_back(t.greedy(prompts[i], 12));
    if (i == 2) t.out.wait(ids[0]);  // later ones reuse a freed state slot
  }
  for (std::size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(t.out.wait(ids[i]).tokens, greedy_alone(dir, prompts[i], 12))
        << "prompt length " << lengths[i];
  std::int32_t max_batch = 0;
  for (const StepStats& s : t.engine.metrics().recent)
    max_batch = std::max(max_batch, s.batch_size);
  EXPECT_GT(max_batch, 2);
}

TEST_P(HybridEngine, PreemptionRecomputesTheStateAndKeepsOutputsExact) {
  const std::string dir = fixture(GetParam());
  std::mt19937 rng(3);
  std::vector<Ids> prompts;
  for (int len : {40, 70, 55, 30}) prompts.push_back(random_ids(rng, len));
  EngineUnderTest t(dir, small_steps(20));  // 160 positions for four sequences of 50..90
  std::vector<RequestId> ids;
  for (const Ids& p : prompts) ids.push_back(t.greedy(p, 20));
  for (std::size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(t.out.wait(ids[i]).tokens, greedy_alone(dir, prompts[i], 20)) << i;
  EXPECT_GT(t.engine.metrics().totals.preemptions, 0u);
}

// The first request leaves snapshots at 32 (its prompt's snapshot point, 16 tokens before the
// end) and 56 (its end) only: the second shares 30 tokens of KV but no snapshot within them, so
// it must start over.
TEST_P(HybridEngine, CachedKvPrefixWithoutItsStateIsRecomputed) {
  const std::string dir = fixture(GetParam());
  std::mt19937 rng(9);
  const Ids first = random_ids(rng, 50);
  Ids second(first.begin(), first.begin() + 30);
  for (std::int32_t tok : random_ids(rng, 12)) second.push_back(tok);
  EngineUnderTest t(dir, small_steps());
  t.out.wait(t.greedy(first, 10));
  const Collector::Result r = t.out.wait(t.greedy(second, 10));
  EXPECT_EQ(r.usage.cached_tokens, 0);  // honest: nothing was resumed
  EXPECT_EQ(r.tokens, greedy_alone(dir, second, 10));
}

TEST_P(HybridEngine, WithoutSnapshotsNothingIsReused) {
  const std::string dir = fixture(GetParam());
  std::mt19937 rng(4);
  const Ids first = random_ids(rng, 40);
  EngineConfig cfg = small_steps();
  cfg.state_snapshot_bytes = 0;
  EngineUnderTest t(dir, cfg);
  const Collector::Result r1 = t.out.wait(t.greedy(first, 6));
  Ids second = first;
  second.insert(second.end(), r1.tokens.begin(), r1.tokens.end());
  for (std::int32_t tok : random_ids(rng, 7)) second.push_back(tok);
  const Collector::Result r2 = t.out.wait(t.greedy(second, 8));
  EXPECT_EQ(r2.usage.cached_tokens, 0);
  EXPECT_EQ(r2.tokens, greedy_alone(dir, second, 8));
}

// A conversation's next turn (the previous prompt, its answer, new tokens) resumes from the
// snapshot the previous request left at its last block boundary (37 + 12 - 1 = 48 tokens
// computed: 6 blocks of 8, the snapshot interval being far larger).
TEST_P(HybridEngine, NextTurnResumesFromTheEndOfThePreviousOne) {
  const std::string dir = fixture(GetParam());
  std::mt19937 rng(6);
  const Ids first = random_ids(rng, 37);
  EngineUnderTest t(dir, small_steps());
  const Collector::Result r1 = t.out.wait(t.greedy(first, 12));
  Ids second = first;
  second.insert(second.end(), r1.tokens.begin(), r1.tokens.end());
  for (std::int32_t tok : random_ids(rng, 10)) second.push_back(tok);
  const Collector::Result r2 = t.out.wait(t.greedy(second, 8));
  EXPECT_EQ(r2.usage.cached_tokens, 48);
  EXPECT_EQ(r2.tokens, greedy_alone(dir, second, 8));
}

// Snapshots every 8 tokens: a prompt sharing L tokens resumes at the deepest snapshot <= L (a
// multiple of 8) and gives the cold run's tokens and top logprobs from each of them (the cold
// run: an engine without snapshots).
TEST_P(HybridEngine, ResumeFromEverySnapshotPositionEqualsAColdRun) {
  const std::string dir = fixture(GetParam());
  std::mt19937 rng(8);
  const Ids first = random_ids(rng, 60);
  EngineUnderTest t(dir, small_steps(256, 8));
  EngineConfig cold_cfg = small_steps();
  cold_cfg.state_snapshot_bytes = 0;
  EngineUnderTest cold(dir, cold_cfg);
  const Collector::Result r1 = t.out.wait(t.greedy(first, 4));
  Ids all = first;
  all.insert(all.end(), r1.tokens.begin(), r1.tokens.end());  // 64, of which 63 computed
  for (const int shared : {5, 8, 13, 30, 57, 63}) {
    SCOPED_TRACE(shared);
    Ids prompt(all.begin(), all.begin() + shared);
    for (std::int32_t tok : random_ids(rng, 5)) prompt.push_back(tok);
    const Collector::Result r = t.out.wait(t.greedy(prompt, 6, 5));
    EXPECT_EQ(r.usage.cached_tokens, shared / 8 * 8);
    EXPECT_EQ(r.tokens, greedy_alone(dir, prompt, 6));
    const Collector::Result c = cold.out.wait(cold.greedy(prompt, 6, 5));
    ASSERT_EQ(r.top.size(), c.top.size());
    for (std::size_t i = 0; i < r.top.size(); ++i) {
      ASSERT_EQ(r.top[i].size(), c.top[i].size());
      for (std::size_t j = 0; j < r.top[i].size(); ++j) {
        EXPECT_EQ(r.top[i][j].id, c.top[i][j].id);
        EXPECT_NEAR(r.top[i][j].logprob, c.top[i][j].logprob, 1e-4);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, HybridEngine, ::testing::Values("qwen3_5-text", "qwen3-next"),
                         test::fixture_test_name);

}  // namespace
}  // namespace akv
