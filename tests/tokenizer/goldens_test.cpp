// Fidelity against goldens/tokenization/*.json (HF tokenizers 0.23.2): ids without and with
// special tokens, and decode(ids) for every case of every shipped tokenizer.
#include <gtest/gtest.h>

#include <cstdio>

#include "testdata.h"

namespace akv {
namespace {

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

struct GoldenSet {
  const char* golden;     // goldens/tokenization/<golden>.json
  const char* tokenizer;  // tokenizers/<tokenizer>/
  const char* json_name;
};

class GoldensTest : public ::testing::TestWithParam<GoldenSet> {};

TEST_P(GoldensTest, IdsAndDecodeMatchHuggingFace) {
  const GoldenSet& set = GetParam();
  const Tokenizer& tok = test::shared_tokenizer(set.tokenizer, set.json_name);
  nlohmann::json golden = test::read_json(test::testdata_path(std::string("goldens/tokenization/") + set.golden + ".json"));
  int n_cases = 0, n_ids = 0, n_special = 0, n_decoded = 0;
  for (const auto& c : golden["cases"]) {
    ++n_cases;
    std::string text = c["text"];
    std::string id = c["id"];
    auto expected = c["ids"].get<std::vector<int32_t>>();
    auto expected_special = c["ids_with_special"].get<std::vector<int32_t>>();
    std::string expected_decoded = c["decoded"];
    auto ids = tok.encode(text, false);
    auto ids_special = tok.encode(text, true);
    std::string decoded = tok.decode(expected, false);
    n_ids += ids == expected;
    n_special += ids_special == expected_special;
    n_decoded += decoded == expected_decoded;
    EXPECT_EQ(show(ids), show(expected)) << set.golden << " " << id << " text=" << text;
    EXPECT_EQ(show(ids_special), show(expected_special)) << set.golden << " " << id;
    EXPECT_EQ(decoded, expected_decoded) << set.golden << " " << id;
    EXPECT_EQ(show(tok.encode_reference(text, false)), show(expected)) << "reference path, " << id;
  }
  std::printf("[goldens] %-20s ids %d/%d, ids_with_special %d/%d, decoded %d/%d\n", set.golden, n_ids, n_cases,
              n_special, n_cases, n_decoded, n_cases);
}

INSTANTIATE_TEST_SUITE_P(
    AllTokenizers, GoldensTest,
    ::testing::Values(GoldenSet{"llama3", "llama3", "tokenizer.json"}, GoldenSet{"qwen3", "qwen3", "tokenizer.json"},
                      GoldenSet{"llama2", "llama2", "tokenizer.json"}, GoldenSet{"phi3", "phi3", "tokenizer.json"},
                      GoldenSet{"gemma3", "gemma3", "tokenizer.json"},
                      GoldenSet{"mistral-v0.1", "mistral-v0.1", "tokenizer.json"},
                      GoldenSet{"mistral-v0.3", "mistral-v0.3", "tokenizer.json"},
                      GoldenSet{"mistral-v0.3-legacy", "mistral-v0.3", "tokenizer.legacy.json"}),
    [](const ::testing::TestParamInfo<GoldenSet>& info) {
      std::string name = info.param.golden;
      for (char& c : name)
        if (c == '-' || c == '.') c = '_';
      return name;
    });

}  // namespace
}  // namespace akv
