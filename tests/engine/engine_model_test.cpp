// The engine on real models (scalar reference backend): batched, chunked, preempted and
// prefix-cached runs give exactly the tokens and logits of one sequence run alone.
#include "engine/engine.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <random>

#include "backend/cpu/fast_backend.h"
#include "backend/cpu/reference_backend.h"
#include "base/error.h"
#include "models/sequence_runner.h"
#include "engine_test_util.h"

namespace akv {
namespace {

const std::string kTestdata = AGENTKV_TESTDATA;
const std::string kStories = kTestdata + "/models/stories260K/hf";
std::string tiny(const std::string& name) { return kTestdata + "/models/tiny-random/" + name; }

using test::Collector;
using test::greedy_alone;
using test::Ids;


Ids random_ids(std::mt19937& rng, int n, int vocab = 512) {
  Ids ids(n);
  for (auto& t : ids) t = std::uniform_int_distribution<int>(3, vocab - 1)(rng);
  return ids;
}

struct EngineUnderTest {
  EngineUnderTest(const std::string& dir, EngineConfig cfg) : engine(load_model(dir, backend), backend, cfg) {}
  RequestId greedy(Ids prompt, int n, std::string ns = "", std::int32_t n_logprobs = 0) {
    GenerateRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = n;
    r.ns = std::move(ns);
    r.n_logprobs = n_logprobs;
    return engine.submit(std::move(r), out.callback());
  }
  ReferenceBackend backend;
  Collector out;
  Engine engine;
};

EngineConfig small_steps(std::int32_t n_blocks = 256) {
  return {.block_size = 8,
          .n_blocks = n_blocks,
          .scheduler = {.max_batch_tokens = 24, .max_prefill_chunk = 10, .max_running = 8}};
}

class BatchedGreedy : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchedGreedy, EqualsEachSequenceRunAlone) {
  const std::string dir = GetParam() == "stories260K" ? kStories : tiny(GetParam());
  std::mt19937 rng(11);
  const std::vector<int> lengths{1, 5, 17, 33, 64, 9, 100};
  const int n_new = 16;
  std::vector<Ids> prompts;
  for (int len : lengths) prompts.push_back(random_ids(rng, len));
  EngineUnderTest t(dir, small_steps());
  std::vector<RequestId> ids;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    ids.push_back(t.greedy(prompts[i], n_new));
    if (i == 3) t.out.wait(ids[0]);  // later ones join a running batch
  }
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const Collector::Result r = t.out.wait(ids[i]);
    EXPECT_EQ(r.reason, FinishReason::Length);
    EXPECT_EQ(r.tokens, greedy_alone(dir, prompts[i], n_new)) << "prompt length " << lengths[i];
    EXPECT_EQ(r.usage.prompt_tokens, lengths[i]);
    EXPECT_EQ(r.usage.generated_tokens, n_new);
  }
  const EngineMetrics m = t.engine.metrics();
  EXPECT_EQ(m.totals.requests_finished, prompts.size());
  std::int32_t max_batch = 0;
  for (const StepStats& s : m.recent) {
    max_batch = std::max(max_batch, s.batch_size);
    EXPECT_LE(s.prefill_tokens + s.decode_tokens, 24);
  }
  EXPECT_GT(max_batch, 2);
  EXPECT_EQ(m.recent.back().kv.n_used, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, BatchedGreedy,
                         ::testing::Values("stories260K", "qwen3-qknorm-tied", "gemma3-text-swa8"));

// The engine allocates the KV dtype it is given (serve passes the backend's preferred one, BF16
// on a GPU), and batched prefill chunks, prefix hits and decodes on it give the tokens of a
// sequence run alone with the same KV dtype.
TEST(EngineModel, Bf16KvCacheEqualsEachSequenceRunAloneOnBf16) {
  std::mt19937 rng(5);
  EngineConfig cfg = small_steps();
  cfg.kv_dtype = DType::BF16;
  EngineUnderTest t(kStories, cfg);
  ASSERT_EQ(t.engine.kv_layout().dtype, DType::BF16);
  EXPECT_EQ(t.engine.kv_layout().bytes(), kv_layout_for(t.engine.model_config(), 256, 8, DType::F32).bytes() / 2);
  const Ids shared = random_ids(rng, 40);
  std::vector<Ids> prompts;
  for (int len : {3, 21, 50}) {
    Ids p = shared;
    for (std::int32_t id : random_ids(rng, len)) p.push_back(id);
    prompts.push_back(std::move(p));
  }
  std::vector<RequestId> ids;
  for (const Ids& p : prompts) ids.push_back(t.greedy(p, 12));
  for (std::size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(t.out.wait(ids[i]).tokens, greedy_alone(kStories, prompts[i], 12, DType::BF16)) << "prompt " << i;
  const Collector::Result again = t.out.wait(t.greedy(prompts[2], 12));
  EXPECT_EQ(again.usage.cached_tokens, static_cast<std::int64_t>(prompts[2].size()) - 1);
  EXPECT_EQ(again.tokens, greedy_alone(kStories, prompts[2], 12, DType::BF16));
}

// A step whose due tokens are all plain greedy picks brings back only ids (Backend::sample_rows at temperature 0);
// a request with logprobs keeps the logits path for its steps. The tokens must not depend on
// the path, alone or in a batch that mixes both, on either CPU backend.
// Every prompt batched in one engine on the reference (or fast) backend; n_logprobs(i) and
// sampling(i) per request. The results in prompt order.
template <typename NLogprobs, typename Sampling>
std::vector<Collector::Result> run_batched(const std::string& dir, bool fast, const std::vector<Ids>& prompts,
                                           int n_new, NLogprobs n_logprobs, Sampling sampling) {
  std::unique_ptr<Backend> backend;
  if (fast) backend = std::make_unique<FastBackend>(2);
  else backend = std::make_unique<ReferenceBackend>();
  Engine engine(load_model(dir, *backend), *backend, small_steps());
  Collector out;
  std::vector<RequestId> ids;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest r;
    r.prompt = prompts[i];
    r.max_tokens = n_new;
    r.n_logprobs = n_logprobs(i);
    r.sampling = sampling(i);
    ids.push_back(engine.submit(std::move(r), out.callback()));
  }
  std::vector<Collector::Result> results;
  for (RequestId id : ids) results.push_back(out.wait(id));
  return results;
}

class GreedyIds : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(GreedyIds, SameTokensWithAndWithoutTheShortcut) {
  const std::string name = std::get<0>(GetParam());  // not a structured binding: clang 14 cannot
  const bool fast = std::get<1>(GetParam());          // capture one in a lambda (the TSan build)
  const std::string dir = name == "stories260K" ? kStories : tiny(name);
  std::mt19937 rng(23);
  std::vector<Ids> prompts;
  for (int len : {3, 12, 40, 7, 65, 1}) prompts.push_back(random_ids(rng, len));
  const int n_new = 12;
  auto run = [&](auto n_logprobs, SamplingParams sampling) {
    return run_batched(dir, fast, prompts, n_new, n_logprobs, [&](std::size_t) { return sampling; });
  };
  const auto ids_path = run([](std::size_t) { return 0; }, {});
  const auto logits_path = run([](std::size_t) { return 1; }, {});
  const auto mixed = run([](std::size_t i) { return i % 3 == 0 ? 2 : 0; }, {});
  const auto top_k1 = run([](std::size_t) { return 0; }, {.temperature = 0.8f, .top_k = 1});
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(ids_path[i].tokens.size(), static_cast<std::size_t>(n_new));
    EXPECT_EQ(ids_path[i].tokens, logits_path[i].tokens) << "prompt " << i;
    EXPECT_EQ(mixed[i].tokens, logits_path[i].tokens) << "prompt " << i;
    EXPECT_EQ(top_k1[i].tokens, logits_path[i].tokens) << "prompt " << i;
    // The paths really differ: a picked id comes without a logprob.
    for (float lp : ids_path[i].logprobs) EXPECT_TRUE(std::isnan(lp));
    for (float lp : top_k1[i].logprobs) EXPECT_TRUE(std::isnan(lp));
    for (float lp : logits_path[i].logprobs) EXPECT_TRUE(std::isfinite(lp));
  }
  if (!fast) {
    EXPECT_EQ(ids_path[2].tokens, greedy_alone(dir, prompts[2], n_new));
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GreedyIds,
                         ::testing::Combine(::testing::Values("stories260K", "qwen3-qknorm-tied", "llama3-rope-scaled"),
                                            ::testing::Bool()));

// Seeded temperature-1 requests without filters draw their ids on the backend
// (Backend::sample_rows) with the uniforms sample() would use, so the tokens are those of the
// logits path, alone or batched with greedy requests; a request with a filter (top-p) puts the
// steps it is due in on the logits path without changing anyone's tokens.
class SampledIds : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(SampledIds, SameTokensWithAndWithoutTheShortcut) {
  const std::string name = std::get<0>(GetParam());  // not a structured binding: clang 14 cannot
  const bool fast = std::get<1>(GetParam());          // capture one in a lambda (the TSan build)
  const std::string dir = name == "stories260K" ? kStories : tiny(name);
  std::mt19937 rng(29);
  std::vector<Ids> prompts;
  for (int len : {3, 12, 40, 7, 65, 1}) prompts.push_back(random_ids(rng, len));
  const int n_new = 12;
  const SamplingParams greedy{};
  auto drawn = [](std::size_t i) { return SamplingParams{.temperature = 1.0f, .seed = 100 + i}; };
  auto run = [&](auto n_logprobs, auto sampling) {
    return run_batched(dir, fast, prompts, n_new, n_logprobs, sampling);
  };
  auto none = [](std::size_t) { return 0; };
  const auto ids_path = run(none, drawn);
  const auto logits_path = run([](std::size_t) { return 1; }, drawn);
  const auto greedy_ids = run(none, [&](std::size_t) { return greedy; });
  const auto mixed = run(none, [&](std::size_t i) { return i % 2 ? greedy : drawn(i); });
  const auto filtered = run(none, [&](std::size_t i) {
    SamplingParams p = drawn(i);
    if (i == 4) p.top_p = 0.9f;
    return p;
  });
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(ids_path[i].tokens.size(), static_cast<std::size_t>(n_new));
    EXPECT_EQ(ids_path[i].tokens, logits_path[i].tokens) << "prompt " << i;
    EXPECT_EQ(mixed[i].tokens, i % 2 ? greedy_ids[i].tokens : logits_path[i].tokens) << "prompt " << i;
    if (i != 4) {
      EXPECT_EQ(filtered[i].tokens, logits_path[i].tokens) << "prompt " << i;
    }
    // The paths really differ: a drawn id comes without a logprob.
    for (float lp : ids_path[i].logprobs) EXPECT_TRUE(std::isnan(lp));
    for (float lp : logits_path[i].logprobs) EXPECT_TRUE(std::isfinite(lp));
  }
  EXPECT_NE(ids_path[0].tokens, greedy_ids[0].tokens) << "temperature 1 draws, not the argmax";
}

INSTANTIATE_TEST_SUITE_P(Models, SampledIds,
                         ::testing::Combine(::testing::Values("stories260K", "qwen3-qknorm-tied"), ::testing::Bool()));

TEST(EngineModel, Stories260KGreedyFromBosMatchesReferenceWhileSharingTheBatch) {
  std::ifstream f(kStories + "/reference.json");
  const nlohmann::json ref = nlohmann::json::parse(f);
  const Ids want = ref["greedy_from_bos"]["generated_ids_200_steps"].get<Ids>();
  EngineUnderTest t(kStories, small_steps());
  std::mt19937 rng(5);
  const RequestId other = t.greedy(random_ids(rng, 150), 60);
  const RequestId bos = t.greedy({1}, 200);
  EXPECT_EQ(t.out.wait(bos).tokens, want);
  EXPECT_EQ(t.out.wait(other).tokens.size(), 60u);
}

TEST(EngineModel, PreemptionUnderMemoryPressureKeepsOutputsExact) {
  std::mt19937 rng(3);
  std::vector<Ids> prompts;
  for (int len : {40, 70, 55, 90}) prompts.push_back(random_ids(rng, len));
  // 24 blocks of 8 = 192 positions for four sequences growing to 60..110 tokens each.
  EngineUnderTest t(kStories, small_steps(24));
  std::vector<RequestId> ids;
  for (const Ids& p : prompts) ids.push_back(t.greedy(p, 20));
  for (std::size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(t.out.wait(ids[i]).tokens, greedy_alone(kStories, prompts[i], 20)) << i;
  EXPECT_GT(t.engine.metrics().totals.preemptions, 0u);
}

void expect_same_logprobs(const Collector::Result& a, const Collector::Result& b) {
  ASSERT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.top.size(), b.top.size());
  for (std::size_t i = 0; i < a.top.size(); ++i) {
    ASSERT_EQ(a.top[i].size(), b.top[i].size());
    for (std::size_t j = 0; j < a.top[i].size(); ++j) {
      EXPECT_EQ(a.top[i][j].id, b.top[i][j].id);
      EXPECT_NEAR(a.top[i][j].logprob, b.top[i][j].logprob, 1e-5);
    }
  }
}

TEST(EngineModel, PrefixHitGivesTheLogitsOfAColdRun) {
  std::mt19937 rng(9);
  const Ids first = random_ids(rng, 50);
  Ids second(first.begin(), first.begin() + 45);  // shares 5 full blocks and 5 of the 6th
  for (std::int32_t t : random_ids(rng, 12)) second.push_back(t);

  EngineUnderTest warm(kStories, small_steps());
  warm.out.wait(warm.greedy(first, 10));
  const Collector::Result hit = warm.out.wait(warm.greedy(second, 8, "", 20));
  EXPECT_EQ(hit.usage.cached_tokens, 45);  // 40 shared + 5 copied on write

  EngineUnderTest cold(kStories, small_steps());
  const Collector::Result miss = cold.out.wait(cold.greedy(second, 8, "", 20));
  EXPECT_EQ(miss.usage.cached_tokens, 0);
  expect_same_logprobs(hit, miss);

  // Another namespace never sees the cached prefix.
  const Collector::Result other_ns = warm.out.wait(warm.greedy(second, 8, "tenant-b", 20));
  EXPECT_EQ(other_ns.usage.cached_tokens, 0);
  expect_same_logprobs(other_ns, miss);
}

TEST(EngineModel, TwoConversationsShareTheSystemPromptOnce) {
  std::mt19937 rng(21);
  const Ids system = random_ids(rng, 64);  // 8 blocks
  Ids a = system, b = system;
  for (std::int32_t t : random_ids(rng, 7)) a.push_back(t);
  for (std::int32_t t : random_ids(rng, 9)) b.push_back(t);
  EngineUnderTest t(kStories, small_steps());
  const RequestId ra = t.greedy(a, 40);
  while (t.out.n_tokens(ra) < 2) std::this_thread::yield();
  const RequestId rb = t.greedy(b, 5);  // joins while a is decoding and holds the system blocks
  const Collector::Result rb_res = t.out.wait(rb);
  EXPECT_EQ(rb_res.usage.cached_tokens, 64);
  EXPECT_EQ(rb_res.tokens, greedy_alone(kStories, b, 5));
  EXPECT_EQ(t.out.wait(ra).tokens, greedy_alone(kStories, a, 40));
}

// The step phases (StepPhases) add up to each step's time and their totals to the step-time
// histogram's sum; prefill and decode steps spend time in the forward and in sampling, and a
// prefix hit is found by the KV manager inside schedule().
TEST(EngineModel, StepPhasesAddUpToTheStepTime) {
  std::mt19937 rng(12);
  const Ids prompt = random_ids(rng, 60);
  EngineUnderTest t(kStories, small_steps());
  t.out.wait(t.greedy(prompt, 12));
  t.out.wait(t.greedy(prompt, 4));  // a prefix hit
  const EngineMetrics m = t.engine.metrics();
  ASSERT_GT(m.recent.size(), 10u);
  for (const StepStats& s : m.recent) {
    for (const auto& [name, ms] : s.phases.named()) EXPECT_GE(ms, 0.0) << name << " of step " << s.step;
    EXPECT_NEAR(s.phases.sum_ms(), s.step_ms, 1e-6 + 1e-9 * s.step_ms) << "step " << s.step;
    if (s.prefill_tokens + s.decode_tokens > 0) {
      EXPECT_GT(s.phases.forward_ms, 0.0) << "step " << s.step;
    }
  }
  const StepPhases& total = m.totals.phases;
  EXPECT_NEAR(total.sum_ms(), m.step_time.sum_ms, 1e-6 * m.step_time.sum_ms + 1e-6);
  EXPECT_GT(total.forward_ms, 0.0);
  EXPECT_GT(total.sample_ms, 0.0);
  EXPECT_GT(total.commit_ms, 0.0);
  EXPECT_GT(total.kv_ms, 0.0);
  EXPECT_GT(total.schedule_ms, 0.0);
  EXPECT_GT(total.build_ms, 0.0);
}

TEST(EngineModel, SecondTurnReusesEveryBlockOfTheFirstIncludingGeneratedTokens) {
  std::mt19937 rng(4);
  const Ids turn1 = random_ids(rng, 20);
  EngineUnderTest t(kStories, small_steps());
  const Collector::Result r1 = t.out.wait(t.greedy(turn1, 20));
  Ids turn2 = turn1;
  turn2.insert(turn2.end(), r1.tokens.begin(), r1.tokens.end());
  for (std::int32_t x : random_ids(rng, 5)) turn2.push_back(x);
  const Collector::Result r2 = t.out.wait(t.greedy(turn2, 6));
  // 39 tokens had KV after turn 1 (the last sampled one had none): 4 full blocks of 8.
  EXPECT_EQ(r2.usage.cached_tokens, 32);
  EXPECT_EQ(r2.tokens, greedy_alone(kStories, turn2, 6));
}

TEST(EngineModel, CancelAndFailingCallbacksFreeTheirBlocksAndDisturbNobody) {
  std::mt19937 rng(8);
  const Ids p1 = random_ids(rng, 30), p2 = random_ids(rng, 45), p3 = random_ids(rng, 25);
  EngineUnderTest t(kStories, small_steps());
  const RequestId keep = t.greedy(p1, 30);
  const RequestId cancelled = t.greedy(p2, 200);
  GenerateRequest bad;
  bad.prompt = p3;
  bad.max_tokens = 50;
  std::atomic<int> seen = 0;
  const RequestId throws = t.engine.submit(bad, [&](const EngineEvent& e) {
    if (e.kind == EventKind::Token && ++seen == 3) throw std::runtime_error("client went away");
  });
  while (t.out.n_tokens(cancelled) < 4) std::this_thread::yield();
  t.engine.cancel(cancelled);
  const Collector::Result rc = t.out.wait(cancelled);
  EXPECT_EQ(rc.reason, FinishReason::Cancelled);
  EXPECT_LT(rc.tokens.size(), 200u);
  EXPECT_EQ(t.out.wait(keep).tokens, greedy_alone(kStories, p1, 30));
  while (t.engine.metrics().totals.requests_finished < 3) std::this_thread::yield();
  EXPECT_EQ(seen, 3);
  (void)throws;
  // Let one more step record the final usage, then nothing is held.
  t.greedy({1}, 1);
  while (t.engine.metrics().totals.requests_finished < 4) std::this_thread::yield();
  EXPECT_EQ(t.engine.metrics().recent.back().kv.n_used, 0);
}

TEST(EngineModel, InvalidRequestsAreRejectedAtSubmit) {
  EngineUnderTest t(kStories, small_steps());
  GenerateRequest r;
  EXPECT_THROW(t.engine.submit(r, nullptr), Error);  // empty prompt
  r.prompt = {1, 512};
  EXPECT_THROW(t.engine.submit(r, nullptr), Error);  // outside the vocabulary
  r.prompt = Ids(512, 1);
  EXPECT_THROW(t.engine.submit(r, nullptr), Error);  // no room left in the context
  r.prompt = {1};
  r.sampling.top_p = 0.0f;
  EXPECT_THROW(t.engine.submit(r, nullptr), Error);
}

// A pool smaller than the model's context caps it, and the error says so (not a silent cap).
TEST(EngineModel, APromptBeyondTheKvPoolIsRejectedNamingThePool) {
  EngineUnderTest t(kStories, small_steps(/*n_blocks=*/16));  // 128 positions; the model has 512
  EXPECT_EQ(t.engine.model_context(), 512);
  EXPECT_EQ(t.engine.max_context(), 128);
  EXPECT_EQ(t.engine.kv_capacity_tokens(), 128);
  GenerateRequest r;
  r.prompt = Ids(200, 1);
  try {
    t.engine.submit(r, nullptr);
    FAIL() << "a 200-token prompt does not fit 128 positions";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV cache pool holds 128"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--kv-cache-mb"), std::string::npos) << e.what();
  }
  EngineUnderTest roomy(kStories, small_steps(/*n_blocks=*/256));
  EXPECT_EQ(roomy.engine.max_context(), 512);
  EXPECT_EQ(roomy.engine.context_limit_note(), "");
}

TEST(EngineModel, SeededSamplingIsTheSameAloneAndInABatch) {
  std::mt19937 rng(2);
  const Ids p = random_ids(rng, 20);
  GenerateRequest r;
  r.prompt = p;
  r.max_tokens = 24;
  r.sampling = {.temperature = 0.9f, .top_k = 50, .top_p = 0.95f, .seed = 77};
  EngineUnderTest alone(kStories, small_steps());
  const Collector::Result a = alone.out.wait(alone.engine.submit(r, alone.out.callback()));
  EngineUnderTest busy(kStories, small_steps());
  for (int i = 0; i < 3; ++i) busy.greedy(random_ids(rng, 30 + 10 * i), 30);
  const Collector::Result b = busy.out.wait(busy.engine.submit(r, busy.out.callback()));
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.tokens.size(), 24u);
}

}  // namespace
}  // namespace akv
