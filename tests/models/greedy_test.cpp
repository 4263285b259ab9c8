// Greedy decoding, one token per forward after the prompt's prefill, against recorded ids:
// stories260K (a real trained model) for 200 steps from BOS and from "Once upon a time", and
// the tiny-random models' 20 greedy ids (where the fp64 top-1/top-2 margin allows a verdict).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu/fast_backend.h"
#include "backend/cpu/reference_backend.h"
#include "models/model.h"

namespace akv {
namespace {

const std::string kTestdata = AGENTKV_TESTDATA;

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// Prefills `prompt` then decodes `n_new` tokens greedily; returns the new ids.
std::vector<std::int32_t> greedy(Model& model, Backend& backend, std::vector<std::int32_t> prompt, int n_new) {
  const ModelConfig& c = model.config();
  const std::int64_t block = 32;
  const std::int64_t n_blocks = (static_cast<std::int64_t>(prompt.size()) + n_new + block - 1) / block;
  KvStorage kv = backend.alloc_kv(kv_layout_for(c, n_blocks, block, DType::F32));
  std::vector<std::int32_t> table(n_blocks);
  for (std::int64_t i = 0; i < n_blocks; ++i) table[i] = static_cast<std::int32_t>(i);
  std::vector<float> logits(c.vocab_size);
  std::vector<std::int32_t> out;
  std::vector<std::int32_t> tokens = prompt;
  std::int32_t pos = 0;
  for (int step = 0; step < n_new; ++step) {
    SequenceChunk chunk{.first_row = 0, .n_tokens = static_cast<std::int32_t>(tokens.size()), .start_pos = pos, .block_table = table};
    const std::vector<std::int32_t> positions = positions_for({&chunk, 1});
    const std::int32_t last = chunk.n_tokens - 1;
    ForwardBatch batch{.tokens = tokens, .positions = positions, .sequences = {&chunk, 1}, .logit_rows = {&last, 1}};
    model.forward(batch, kv, logits);
    pos += chunk.n_tokens;
    const auto next = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    tokens = {next};
  }
  return out;
}

TEST(Stories260K, GreedyFromBosMatchesRecorded200Ids) {
  const std::string dir = kTestdata + "/models/stories260K/hf";
  const auto ref = read_json(dir + "/reference.json");
  const auto want = ref["greedy_from_bos"]["generated_ids_200_steps"].get<std::vector<std::int32_t>>();
  ReferenceBackend backend;
  auto model = load_model(dir, backend);
  EXPECT_EQ(greedy(*model, backend, {1}, static_cast<int>(want.size())), want);
}

TEST(Stories260K, GreedyFromPromptMatchesRecordedIds) {
  const std::string dir = kTestdata + "/models/stories260K/hf";
  const auto ref = read_json(dir + "/reference.json");
  const auto prompt = ref["greedy_prompt"]["prompt_ids_with_bos"].get<std::vector<std::int32_t>>();
  const auto want = ref["greedy_prompt"]["generated_ids"].get<std::vector<std::int32_t>>();
  ReferenceBackend backend;
  auto model = load_model(dir, backend);
  EXPECT_EQ(greedy(*model, backend, prompt, static_cast<int>(want.size())), want);
}

class TinyRandomGreedy : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyRandomGreedy, MatchesReferenceIds) {
  const std::string dir = kTestdata + "/models/tiny-random/" + GetParam();
  const auto ref = read_json(dir + "/reference.json");
  const auto prompt = ref["input_ids"].get<std::vector<std::int32_t>>();
  const auto want = ref["greedy_20"].get<std::vector<std::int32_t>>();
  const auto margins = ref["greedy_top1_minus_top2_logit_f64"].get<std::vector<double>>();
  ReferenceBackend backend;
  auto model = load_model(dir, backend);
  const auto got = greedy(*model, backend, prompt, static_cast<int>(want.size()));
  // Ids must agree up to the first step whose fp64 margin is below fp32 noise (1e-4); every
  // recorded margin is >= 1e-3, so in practice the whole sequence must match.
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (margins[i] < 1e-4) break;
    ASSERT_EQ(got[i], want[i]) << GetParam() << " step " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TinyRandomGreedy,
                         ::testing::Values("llama3-rope-scaled", "smollm2-like-llama-tied", "qwen2-bias-tied",
                                           "qwen3-qknorm-tied", "mistral-swa8", "phi3-fused", "gemma3-text-swa8"));

// The mixture-of-experts models of tiny-random-w2 on both CPU backends: every recorded fp64
// margin (top-1 vs top-2 logit, k-th vs (k+1)-th router logit) is >= 1e-3, so all 20 ids must match.
class MoeGreedy : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(MoeGreedy, MatchesReferenceIds) {
  const auto& [name, backend_name] = GetParam();
  const std::string dir = kTestdata + "/models/tiny-random-w2/" + name;
  const auto ref = read_json(dir + "/reference.json");
  ASSERT_GE(ref["min_greedy_margin_f64"].get<double>(), 1e-3);
  const auto prompt = ref["input_ids"].get<std::vector<std::int32_t>>();
  const auto want = ref["greedy_ids"].get<std::vector<std::int32_t>>();
  std::unique_ptr<Backend> backend;
  if (backend_name == "fast") backend = std::make_unique<FastBackend>();
  else backend = std::make_unique<ReferenceBackend>();
  auto model = load_model(dir, *backend);
  EXPECT_EQ(greedy(*model, *backend, prompt, static_cast<int>(want.size())), want);
}

INSTANTIATE_TEST_SUITE_P(Models, MoeGreedy,
                         ::testing::Combine(::testing::Values("qwen3-moe", "gpt-oss"),
                                            ::testing::Values("reference", "fast")),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param) + "_" + std::get<1>(info.param);
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(TinyRandomVariants, ShardedAndBf16CheckpointsGiveRecordedGreedyIds) {
  const std::string base = kTestdata + "/models/tiny-random/";
  const auto ref = read_json(base + "llama3-rope-scaled/reference.json");
  const auto prompt = ref["input_ids"].get<std::vector<std::int32_t>>();
  {
    ReferenceBackend backend;
    auto model = load_model(base + "llama3-rope-scaled-sharded", backend);
    EXPECT_EQ(greedy(*model, backend, prompt, 20), ref["greedy_20"].get<std::vector<std::int32_t>>());
  }
  {
    ReferenceBackend backend;
    auto model = load_model(base + "llama3-rope-scaled-bf16", backend);
    const auto want = read_json(base + "llama3-rope-scaled-bf16/reference.json")["greedy_20"];
    EXPECT_EQ(greedy(*model, backend, prompt, 20), want.get<std::vector<std::int32_t>>());
  }
}

}  // namespace
}  // namespace akv
