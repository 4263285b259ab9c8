// GGUF files' tokenizers against the tokenizer.json path: the vocab-only GGUFs of the shared
// test data and this folder's gguf/ fixtures (converted from the shared tokenizers, see
// gguf/README.md) must give goldens/tokenization's ids, ids with specials and decodes, the same
// special ids, and a chat template that renders goldens/chat_templates.json's cases and
// token ids as tokenizer_config.json's does.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "base/mapped_file.h"
#include "chat/chat_template.h"
#include "testdata.h"

namespace akv {
namespace {

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

struct GgufSet {
  const char* name;  // test name
  const char* gguf;  // shared testdata path, or a gguf/ fixture name when `fixture`
  bool fixture;
  const char* golden;     // goldens/tokenization/<golden>.json
  const char* tokenizer;  // tokenizers/<tokenizer>/ (the tokenizer.json path to agree with)
  const char* json_name;
};

const Tokenizer& gguf_tokenizer(const GgufSet& set) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(set.name);
  if (it == cache.end()) {
    const std::string path =
        set.fixture ? test::gguf_fixture_path(set.gguf) : test::testdata_path(set.gguf);
    it = cache.emplace(set.name, Tokenizer::load_or_throw(path)).first;
  }
  return it->second;
}

class GgufGoldensTest : public ::testing::TestWithParam<GgufSet> {};

TEST_P(GgufGoldensTest, IdsAndDecodeMatchTokenizerJson) {
  const GgufSet& set = GetParam();
  const Tokenizer& tok = gguf_tokenizer(set);
  const Tokenizer& json_tok = test::shared_tokenizer(set.tokenizer, set.json_name);
  EXPECT_EQ(tok.bos_id(), json_tok.bos_id());
  EXPECT_EQ(tok.eos_id(), json_tok.eos_id());
  EXPECT_EQ(tok.bos_token(), json_tok.bos_token());
  EXPECT_EQ(tok.eos_token(), json_tok.eos_token());
  EXPECT_EQ(tok.add_bos_token(), json_tok.add_bos_token());
  EXPECT_EQ(tok.vocab_size(), json_tok.vocab_size());

  const nlohmann::json golden = test::read_json(
      test::testdata_path(std::string("goldens/tokenization/") + set.golden + ".json"));
  int n_cases = 0, n_ids = 0, n_special = 0, n_decoded = 0;
  for (const auto& c : golden["cases"]) {
    ++n_cases;
    const std::string text = c["text"];
    const std::string id = c["id"];
    const auto expected = c["ids"].get<std::vector<int32_t>>();
    const auto ids = tok.encode(text, false);
    const auto ids_special = tok.encode(text, true);
    const std::string decoded = tok.decode(expected, false);
    n_ids += ids == expected;
    n_special += ids_special == c["ids_with_special"].get<std::vector<int32_t>>();
    n_decoded += decoded == c["decoded"].get<std::string>();
    EXPECT_EQ(show(ids), show(expected)) << set.name << " " << id << " text=" << text;
    EXPECT_EQ(show(ids_special), show(c["ids_with_special"].get<std::vector<int32_t>>()))
        << set.name << " " << id;
    EXPECT_EQ(decoded, c["decoded"].get<std::string>()) << set.name << " " << id;
  }
  std::printf("[gguf goldens] %-14s ids %d/%d, ids_with_special %d/%d, decoded %d/%d\n", set.name,
              n_ids, n_cases, n_special, n_cases, n_decoded, n_cases);
  EXPECT_GT(n_cases, 100);
}

// The file's template is tokenizer_config.json's, and renders (with the file's bos/eos
// tokens) every transformers golden of that template to the same text and token ids.
TEST_P(GgufGoldensTest, ChatTemplateRendersTheGoldens) {
  const GgufSet& set = GetParam();
  const Tokenizer& tok = gguf_tokenizer(set);
  const Tokenizer& json_tok = test::shared_tokenizer(set.tokenizer, set.json_name);
  if (!json_tok.chat_template()) {
    EXPECT_FALSE(tok.chat_template());
    GTEST_SKIP() << set.tokenizer << " has no chat template";
  }
  ASSERT_TRUE(tok.chat_template()) << set.name;
  EXPECT_EQ(*tok.chat_template(), *json_tok.chat_template());

  const ChatTemplate tmpl = ChatTemplate::parse_or_throw(*tok.chat_template());
  ChatRenderOptions options;
  const std::string config = std::string("tokenizers/") + set.tokenizer + "/tokenizer_config.json";
  const std::string json_path = std::string("tokenizers/") + set.tokenizer + "/" + set.json_name;
  const nlohmann::ordered_json golden = nlohmann::ordered_json::parse(
      read_file_or_throw(test::testdata_path("goldens/chat_templates.json")));
  int n_cases = 0;
  for (const auto& c : golden.at("cases")) {
    if (c.at("template") != config) continue;
    ++n_cases;
    const std::string name = config + " / " + c.at("conversation").get<std::string>();
    nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
    ctx["messages"] = c.at("messages");
    ctx["tools"] = c.at("tools");
    ctx["add_generation_prompt"] = c.at("add_generation_prompt");
    for (const auto& [k, v] : c.at("special_tokens").items()) ctx[k] = v;
    for (const auto& [k, v] : c.at("extra_kwargs").items()) ctx[k] = v;
    if (!tok.bos_token().empty()) ctx["bos_token"] = tok.bos_token();
    if (!tok.eos_token().empty()) ctx["eos_token"] = tok.eos_token();
    if (c.contains("error")) {
      EXPECT_THROW(tmpl.render(ctx, options), Error) << name;
      continue;
    }
    const std::string rendered = tmpl.render(ctx, options);
    EXPECT_EQ(rendered, c.at("rendered").get<std::string>()) << name;
    // The golden's ids come from its tokenizer.json; another variant (Mistral v0.3's legacy
    // one) is compared with its own tokenizer.json path.
    const auto expected = c.at("tokenizer") == json_path
                              ? c.at("token_ids").get<std::vector<int32_t>>()
                              : json_tok.encode(rendered, false);
    EXPECT_EQ(show(tok.encode(rendered, false)), show(expected)) << name;
  }
  EXPECT_GT(n_cases, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Files, GgufGoldensTest,
    ::testing::Values(GgufSet{"llama_spm", "vocab-tests/llama.cpp/gguf/ggml-vocab-llama-spm.gguf",
                              false, "llama2", "llama2", "tokenizer.json"},
                      GgufSet{"phi3", "vocab-tests/llama.cpp/gguf/ggml-vocab-phi-3.gguf", false,
                              "phi3", "phi3", "tokenizer.json"},
                      GgufSet{"llama3", "llama3.gguf", true, "llama3", "llama3", "tokenizer.json"},
                      GgufSet{"qwen3", "qwen3.gguf", true, "qwen3", "qwen3", "tokenizer.json"},
                      GgufSet{"mistral_v0_1", "mistral-v0.1.gguf", true, "mistral-v0.1",
                              "mistral-v0.1", "tokenizer.json"},
                      GgufSet{"mistral_v0_3", "mistral-v0.3.gguf", true, "mistral-v0.3-legacy",
                              "mistral-v0.3", "tokenizer.legacy.json"}),
    [](const ::testing::TestParamInfo<GgufSet>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace akv
