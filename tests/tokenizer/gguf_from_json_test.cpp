// GGUF metadata built here from a shared tokenizer.json by the rules of llama.cpp's converter
// (for the tokenizers with no GGUF fixture: their vocabs are too large to ship twice), then
// mapped by Tokenizer::from_gguf_or_throw: GPT-OSS (gpt2 / gpt-4o) against its tokenizer.json
// path, Gemma 3 (SentencePiece without the space prefix) against its goldens.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "testdata.h"
#include "tokenizer/gguf_vocab.h"

namespace akv {
namespace {

using Json = nlohmann::json;
const std::string kSp = "\xE2\x96\x81";

bool looks_special(const std::string& t) {
  auto wrapped = [&](std::string_view open, std::string_view close) {
    return t.size() >= open.size() + close.size() && t.starts_with(open) && t.ends_with(close);
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wrapped("<unused", ">");
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
  return s;
}

std::optional<int64_t> id_of(const std::vector<std::string>& tokens, const Json& config,
                             const char* key) {
  if (!config.contains(key) || !config[key].is_string()) return std::nullopt;
  for (size_t id = 0; id < tokens.size(); ++id)
    if (tokens[id] == config[key].get<std::string>()) return static_cast<int64_t>(id);
  return std::nullopt;
}

// Tokens and types as the converter lists them: the vocab and the added tokens by id, holes as
// unused [PADn]; added tokens special (or looking special) are control, the others
// user-defined with U+2581 written as spaces.
GgufTokenizerMetadata convert(const Json& tj, const Json& config, const std::string& model,
                              const std::string& pre) {
  GgufTokenizerMetadata m;
  m.model = model;
  m.pre = pre;
  std::map<int64_t, std::string> by_id;
  for (const auto& [text, id] : tj["model"]["vocab"].items()) by_id[id.get<int64_t>()] = text;
  std::map<int64_t, const Json*> added;
  for (const Json& t : tj["added_tokens"]) {
    by_id[t["id"].get<int64_t>()] = t["content"].get<std::string>();
    added[t["id"].get<int64_t>()] = &t;
  }
  const int64_t n = by_id.rbegin()->first + 1;
  m.token_types.emplace();
  for (int64_t id = 0; id < n; ++id) {
    GgufTokenType type = GgufTokenType::Normal;
    std::string text = by_id.count(id) ? by_id[id] : "[PAD" + std::to_string(id) + "]";
    if (!by_id.count(id)) {
      type = GgufTokenType::Unused;
    } else if (added.count(id)) {
      if ((*added[id])["special"].get<bool>() || looks_special(text)) {
        type = GgufTokenType::Control;
      } else {
        type = GgufTokenType::UserDefined;
        text = replace_all(text, kSp, " ");
      }
    } else if (model == "llama" && text.size() == 6 && text.starts_with("<0x")) {
      type = GgufTokenType::Byte;
    }
    m.tokens.push_back(std::move(text));
    m.token_types->push_back(static_cast<int32_t>(type));
  }
  m.bos_id = id_of(m.tokens, config, "bos_token");
  m.eos_id = id_of(m.tokens, config, "eos_token");
  m.unk_id = id_of(m.tokens, config, "unk_token");
  if (config.contains("chat_template") && config["chat_template"].is_string())
    m.chat_template = config["chat_template"].get<std::string>();
  return m;
}

std::vector<std::string> golden_texts(const char* golden) {
  std::vector<std::string> texts;
  const Json cases = test::read_json(
      test::testdata_path(std::string("goldens/tokenization/") + golden + ".json"))["cases"];
  for (const Json& c : cases) texts.push_back(c["text"]);
  return texts;
}

TEST(GgufFromJson, GptOssMatchesTokenizerJson) {
  const Json tj = test::read_json(test::testdata_path("tokenizers/gpt-oss/tokenizer.json"));
  const Json config =
      test::read_json(test::testdata_path("tokenizers/gpt-oss/tokenizer_config.json"));
  GgufTokenizerMetadata m = convert(tj, config, "gpt2", "gpt-4o");
  m.merges.emplace();
  for (const Json& merge : tj["model"]["merges"])
    m.merges->push_back(merge.is_string()
                            ? merge.get<std::string>()
                            : merge[0].get<std::string>() + " " + merge[1].get<std::string>());
  m.add_bos_token = false;
  const Tokenizer tok = Tokenizer::from_gguf_or_throw(m, "gpt-oss.gguf");
  const Tokenizer& json_tok = test::shared_tokenizer("gpt-oss");
  EXPECT_EQ(tok.eos_id(), json_tok.eos_id());
  EXPECT_EQ(tok.add_bos_token(), json_tok.add_bos_token());
  int n = 0, n_same = 0;
  for (const char* golden : {"llama3", "qwen3", "gemma3"}) {
    for (const std::string& text : golden_texts(golden)) {
      ++n;
      const auto ids = tok.encode(text, true);
      n_same += ids == json_tok.encode(text, true);
      EXPECT_EQ(ids, json_tok.encode(text, true)) << text;
      EXPECT_EQ(tok.decode(ids, false), json_tok.decode(ids, false)) << text;
    }
  }
  std::printf("[gguf from json] gpt-oss: %d/%d texts as tokenizer.json\n", n_same, n);
  EXPECT_EQ(n, 3 * 151);
}

// Gemma 3 ships no tokenizer.model here, so its scores are made up from the merge order (a
// token's score is minus the rank of the first merge into it); the vocab, types, specials and
// add_space_prefix=false are as the converter writes them.
TEST(GgufFromJson, Gemma3MatchesGoldens) {
  const Json tj = test::read_json(test::testdata_path("tokenizers/gemma3/tokenizer.json"));
  const Json config =
      test::read_json(test::testdata_path("tokenizers/gemma3/tokenizer_config.json"));
  GgufTokenizerMetadata m = convert(tj, config, "llama", "default");
  std::map<std::string, float> first_rank;
  int64_t rank = 0;
  for (const Json& merge : tj["model"]["merges"]) {
    const std::string joined = merge.is_string()
                                   ? replace_all(merge.get<std::string>(), " ", "")
                                   : merge[0].get<std::string>() + merge[1].get<std::string>();
    first_rank.emplace(joined, -static_cast<float>(rank++));
  }
  m.scores.emplace();
  for (size_t id = 0; id < m.tokens.size(); ++id) {
    const std::string text =
        (*m.token_types)[id] == static_cast<int32_t>(GgufTokenType::UserDefined)
            ? replace_all(m.tokens[id], " ", kSp)
            : m.tokens[id];
    auto it = first_rank.find(text);
    m.scores->push_back(it == first_rank.end() ? -1e9f : it->second);
  }
  m.add_space_prefix = false;
  m.add_bos_token = true;
  const Tokenizer tok = Tokenizer::from_gguf_or_throw(m, "gemma3.gguf");
  const Tokenizer& json_tok = test::shared_tokenizer("gemma3");
  EXPECT_EQ(tok.bos_id(), json_tok.bos_id());
  EXPECT_EQ(tok.eos_id(), json_tok.eos_id());
  ASSERT_TRUE(tok.chat_template());
  EXPECT_EQ(*tok.chat_template(), *json_tok.chat_template());
  const Json golden = test::read_json(test::testdata_path("goldens/tokenization/gemma3.json"));
  int n = 0, n_ids = 0;
  for (const Json& c : golden["cases"]) {
    ++n;
    const std::string text = c["text"];
    const auto ids = tok.encode(text, false);
    n_ids += ids == c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << c["id"] << " " << text;
    EXPECT_EQ(tok.encode(text, true), c["ids_with_special"].get<std::vector<int32_t>>()) << c["id"];
    EXPECT_EQ(tok.decode(c["ids"].get<std::vector<int32_t>>(), false),
              c["decoded"].get<std::string>())
        << c["id"];
  }
  std::printf("[gguf from json] gemma3: ids %d/%d\n", n_ids, n);
  EXPECT_EQ(n, 151);
}

}  // namespace
}  // namespace akv
