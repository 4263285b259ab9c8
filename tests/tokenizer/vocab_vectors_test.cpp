// Fidelity against other projects' vectors: llama.cpp vocab tests (.inp/.out pairs),
// swift-transformers multilingual and *_encoded baselines, and stories260K's tokenizer goldens.
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>

#include "base/mapped_file.h"
#include "testdata.h"

namespace akv {
namespace {

std::vector<std::string> split_cases(const std::string& text) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    size_t hit = text.find(sep, pos);
    if (hit == std::string::npos) {
      std::string last = text.substr(pos);
      if (!last.empty() && last != "\n") out.push_back(last.back() == '\n' ? last.substr(0, last.size() - 1) : last);
      break;
    }
    out.push_back(text.substr(pos, hit - pos));
    pos = hit + sep.size();
  }
  return out;
}

std::vector<std::vector<int32_t>> read_out_lines(const std::string& text) {
  std::vector<std::vector<int32_t>> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::vector<int32_t> ids;
    int32_t id;
    while (words >> id) ids.push_back(id);
    out.push_back(ids);
  }
  return out;
}

struct LlamaCppPair {
  const char* vocab;      // vocab-tests/llama.cpp/ggml-vocab-<vocab>.gguf.{inp,out}
  const char* tokenizer;  // tokenizers/<tokenizer>/
};

class LlamaCppVectorsTest : public ::testing::TestWithParam<LlamaCppPair> {};

TEST_P(LlamaCppVectorsTest, EncodeMatches) {
  const LlamaCppPair& pair = GetParam();
  const Tokenizer& tok = test::shared_tokenizer(pair.tokenizer);
  std::string base = std::string("vocab-tests/llama.cpp/ggml-vocab-") + pair.vocab + ".gguf.";
  auto inputs = split_cases(read_file_or_throw(test::testdata_path(base + "inp")));
  auto expected = read_out_lines(read_file_or_throw(test::testdata_path(base + "out")));
  ASSERT_EQ(inputs.size(), expected.size()) << base;
  int n_pass = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto ids = tok.encode(inputs[i], false);
    n_pass += ids == expected[i];
    EXPECT_EQ(ids, expected[i]) << pair.vocab << " case " << i << ": " << inputs[i];
  }
  std::printf("[llama.cpp] %-10s vs %-7s %d/%zu\n", pair.vocab, pair.tokenizer, n_pass, inputs.size());
}

INSTANTIATE_TEST_SUITE_P(Pairs, LlamaCppVectorsTest,
                         ::testing::Values(LlamaCppPair{"llama-bpe", "llama3"}, LlamaCppPair{"qwen2", "qwen3"},
                                           LlamaCppPair{"gemma-4", "gemma3"}, LlamaCppPair{"llama-spm", "llama2"},
                                           LlamaCppPair{"phi-3", "phi3"}),
                         [](const ::testing::TestParamInfo<LlamaCppPair>& info) {
                           std::string name = info.param.vocab;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

struct MultilingualSet {
  const char* file;       // vocab-tests/swift-transformers/multilingual/<file>
  const char* tokenizer;
};

class SwiftMultilingualTest : public ::testing::TestWithParam<MultilingualSet> {};

// Ids come from transformers' tokenizer(text) (add_special_tokens=True).
TEST_P(SwiftMultilingualTest, EncodeMatches) {
  const MultilingualSet& set = GetParam();
  const Tokenizer& tok = test::shared_tokenizer(set.tokenizer);
  auto inputs = test::read_json(test::testdata_path("vocab-tests/swift-transformers/multilingual/inputs.json"));
  std::map<std::string, std::string> text_of;
  for (const auto& e : inputs) text_of[e["id"]] = e["text"];
  auto golden = test::read_json(test::testdata_path(std::string("vocab-tests/swift-transformers/multilingual/") + set.file));
  int n_pass = 0, n_cases = 0;
  for (const auto& e : golden["entries"]) {
    ++n_cases;
    std::string id = e["id"];
    ASSERT_TRUE(text_of.count(id)) << id;
    auto expected = e["input_ids"].get<std::vector<int32_t>>();
    auto ids = tok.encode(text_of[id], true);
    n_pass += ids == expected;
    EXPECT_EQ(ids, expected) << set.file << " " << id;
  }
  std::printf("[swift multilingual] %-28s %d/%d\n", set.file, n_pass, n_cases);
}

INSTANTIATE_TEST_SUITE_P(Sets, SwiftMultilingualTest,
                         ::testing::Values(MultilingualSet{"qwen2_5_multilingual.json", "qwen3"},
                                           MultilingualSet{"tinyllama_multilingual.json", "llama2"}),
                         [](const ::testing::TestParamInfo<MultilingualSet>& info) {
                           return std::string(info.param.tokenizer);
                         });

// swift-transformers' llama_encoded.json (Llama 2 vocab) and llama_3.2_encoded.json: ids with
// BOS and the decoded text with specials. (gemma_encoded.json is Gemma 1's vocab: not shipped.)
TEST(SwiftEncodedTest, LlamaBaselinesMatch) {
  for (auto [file, name] : {std::pair{"llama_encoded.json", "llama2"}, std::pair{"llama_3.2_encoded.json", "llama3"}}) {
    const Tokenizer& tok = test::shared_tokenizer(name);
    auto j = test::read_json(test::testdata_path(std::string("vocab-tests/swift-transformers/") + file));
    std::string text = j["text"];
    auto expected = j["token_ids"].get<std::vector<int32_t>>();
    auto ids = tok.encode(text, true);
    EXPECT_EQ(ids, expected) << file;
    EXPECT_EQ(tok.decode(ids, false), j["decoded_text"].get<std::string>()) << file;
    std::printf("[swift encoded] %-24s ids %s, decoded %s\n", file, ids == expected ? "ok" : "MISMATCH",
                tok.decode(ids, false) == j["decoded_text"].get<std::string>() ? "ok" : "MISMATCH");
  }
}

// stories260K (a 512-token SentencePiece BPE): HF ids without specials.
TEST(Stories260KTest, TokenizerGoldensMatch) {
  Tokenizer tok = Tokenizer::load_or_throw(test::testdata_path("models/stories260K/hf"));
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  auto golden = test::read_json(test::testdata_path("models/stories260K/hf/tokenizer_goldens.json"));
  int n_pass = 0, n_cases = 0;
  for (const auto& c : golden["cases"]) {
    ++n_cases;
    auto expected = c["ids"].get<std::vector<int32_t>>();
    auto ids = tok.encode(c["text"].get<std::string>(), false);
    n_pass += ids == expected;
    EXPECT_EQ(ids, expected) << c["id"];
  }
  for (const auto& m : golden["mismatches"]) {  // HF side of the llama2.c disagreement (literal "<s>")
    ++n_cases;
    std::string id = m["id"];
    std::string text;
    for (const auto& c : golden["cases"])
      if (c["id"] == id) text = c["text"];
    auto ids = tok.encode(text, false);
    n_pass += ids == m["hf"].get<std::vector<int32_t>>();
    EXPECT_EQ(ids, m["hf"].get<std::vector<int32_t>>()) << id;
  }
  std::printf("[stories260K] %d/%d\n", n_pass, n_cases);
}

}  // namespace
}  // namespace akv
