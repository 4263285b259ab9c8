// GGUF tokenizer metadata -> Tokenizer on small hand-made vocabs: SentencePiece merges from
// scores, byte fallback, the U+2581 space, byte-level BPE with merges, special ids, add_bos,
// and an Error naming the file and key for each kind of bad metadata.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "../tensor/gguf_test_writer.h"
#include "base/error.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/spm_merges.h"
#include "tokenizer/tokenizer.h"

namespace akv {
namespace {

using T = GgufTokenType;
using Ids = std::vector<int32_t>;

const std::string kSp = "\xE2\x96\x81";  // U+2581

// A SentencePiece vocab: "hello" merges ▁h, ll, ▁he, llo, ▁hello (by score), "el" ranks last.
GgufTokenizerMetadata spm_vocab() {
  GgufTokenizerMetadata m;
  m.model = "llama";
  m.pre = "default";
  struct Entry {
    std::string text;
    float score;
    T type;
  };
  const std::vector<Entry> entries = {
      {"<unk>", 0, T::Unknown},      {"<s>", 0, T::Control},
      {"</s>", 0, T::Control},       {"<0xC3>", 0, T::Byte},
      {"<0xA9>", 0, T::Byte},        {kSp, -100, T::Normal},
      {"h", -101, T::Normal},        {"e", -102, T::Normal},
      {"l", -103, T::Normal},        {"o", -104, T::Normal},
      {kSp + "h", -1, T::Normal},    {"el", -10, T::Normal},
      {"ll", -2, T::Normal},         {kSp + "he", -3, T::Normal},
      {"llo", -4, T::Normal},        {kSp + "hello", -5, T::Normal},
      {"[PAD16]", -1000, T::Unused}, {"<x y>", -1000, T::UserDefined},
  };
  m.scores.emplace();
  m.token_types.emplace();
  for (const Entry& e : entries) {
    m.tokens.push_back(e.text);
    m.scores->push_back(e.score);
    m.token_types->push_back(static_cast<int32_t>(e.type));
  }
  m.bos_id = 1;
  m.eos_id = 2;
  m.unk_id = 0;
  m.add_bos_token = true;
  m.add_eos_token = false;
  m.chat_template = "{{ bos_token }}{{ messages[0]['content'] }}";
  return m;
}

TEST(GgufVocab, SentencePieceMergesByScore) {
  const Tokenizer tok = Tokenizer::from_gguf_or_throw(spm_vocab(), "spm.gguf");
  EXPECT_EQ(tok.encode("hello", false), (Ids{15}));
  EXPECT_EQ(tok.encode("hello", true), (Ids{1, 15}));
  EXPECT_EQ(tok.encode_reference("hello", false), (Ids{15}));
  // Byte fallback for a character outside the vocab, <unk> for one without byte tokens.
  EXPECT_EQ(tok.encode("h\xC3\xA9", false), (Ids{10, 3, 4}));
  EXPECT_EQ(tok.encode("hi", false), (Ids{10, 0}));
  // Control tokens split the text; each text piece gets its own ▁ (as llama.cpp and legacy HF).
  EXPECT_EQ(tok.encode("hello</s>hello", false), (Ids{15, 2, 15}));
  // A user-defined token stored with a space is matched with U+2581 (the tokenizer.json form).
  EXPECT_EQ(tok.encode("<x" + kSp + "y>", false), (Ids{17}));
  EXPECT_EQ(tok.decode(Ids{1, 15, 3, 4}, true), "hello\xC3\xA9");
  EXPECT_EQ(tok.decode(Ids{1, 15, 15}, false), "<s> hello hello");
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.bos_token(), "<s>");
  EXPECT_EQ(tok.eos_token(), "</s>");
  EXPECT_TRUE(tok.add_bos_token());
  EXPECT_TRUE(tok.is_special(2));
  EXPECT_FALSE(tok.is_special(17));
  EXPECT_EQ(tok.vocab_size(), 18);
  ASSERT_TRUE(tok.chat_template());
  EXPECT_EQ(*tok.chat_template(), "{{ bos_token }}{{ messages[0]['content'] }}");
}

TEST(GgufVocab, SentencePieceWithoutSpacePrefix) {
  GgufTokenizerMetadata m = spm_vocab();
  m.add_space_prefix = false;  // Gemma
  m.add_bos_token = false;
  const Tokenizer tok = Tokenizer::from_gguf_or_throw(m, "spm.gguf");
  EXPECT_EQ(tok.encode("hello", true), (Ids{6, 7, 14}));
  EXPECT_EQ(tok.encode(" hello", false), (Ids{15}));
  EXPECT_EQ(tok.decode(Ids{15}, false), " hello");
  EXPECT_FALSE(tok.add_bos_token());
}

TEST(GgufVocab, SentencePieceDefaultsAddBos) {
  GgufTokenizerMetadata m = spm_vocab();
  m.add_bos_token.reset();
  m.add_eos_token = true;
  const Tokenizer tok = Tokenizer::from_gguf_or_throw(m, "spm.gguf");
  EXPECT_EQ(tok.encode("hello", true), (Ids{1, 15, 2}));
  EXPECT_EQ(tok.encode("hello", false), (Ids{15}));
}

// Byte-level BPE: "Ġ" is the byte-level image of a space.
GgufTokenizerMetadata gpt2_vocab(const std::string& pre) {
  GgufTokenizerMetadata m;
  m.model = "gpt2";
  m.pre = pre;
  m.tokens = {
      "h",       "e",       "l", "o", "\xC4\xA0", "he", "ll", "llo", "hello", "\xC4\xA0hello",
      "<|end|>", "<think>", "1", "2", "12",       "hel"};
  m.token_types = std::vector<int32_t>(m.tokens.size(), static_cast<int32_t>(T::Normal));
  (*m.token_types)[10] = static_cast<int32_t>(T::Control);
  (*m.token_types)[11] = static_cast<int32_t>(T::UserDefined);
  m.merges =
      std::vector<std::string>{"h e", "l l", "ll o", "he llo", "\xC4\xA0 hello", "1 2", "he l"};
  m.eos_id = 10;
  return m;
}

TEST(GgufVocab, Gpt2MergesAndPreTokenizer) {
  const Tokenizer tok = Tokenizer::from_gguf_or_throw(gpt2_vocab("default"), "bpe.gguf");
  EXPECT_EQ(tok.encode("hello hello", false), (Ids{8, 9}));
  EXPECT_EQ(tok.encode("hello hello", true), (Ids{8, 9}));  // no bos
  EXPECT_EQ(tok.encode("hello<|end|><think>", false), (Ids{8, 10, 11}));
  EXPECT_EQ(tok.encode("12", false), (Ids{14}));
  EXPECT_EQ(tok.decode(Ids{8, 9, 10}, false), "hello hello<|end|>");
  EXPECT_EQ(tok.decode(Ids{8, 10, 11}, true), "hello<think>");
  EXPECT_EQ(tok.eos_id(), 10);
  EXPECT_EQ(tok.bos_id(), -1);
  EXPECT_FALSE(tok.add_bos_token());
  EXPECT_FALSE(tok.chat_template());
}

TEST(GgufVocab, PreTokenizerFamilies) {
  // smollm splits digits one by one; qwen2 too (\p{N}); llama3 keeps up to three together.
  EXPECT_EQ(Tokenizer::from_gguf_or_throw(gpt2_vocab("smollm"), "f").encode("12", false),
            (Ids{12, 13}));
  EXPECT_EQ(Tokenizer::from_gguf_or_throw(gpt2_vocab("qwen2"), "f").encode("12", false),
            (Ids{12, 13}));
  EXPECT_EQ(Tokenizer::from_gguf_or_throw(gpt2_vocab("llama-bpe"), "f").encode("12", false),
            (Ids{14}));
  // llama3's ignore_merges: a word that is a token is that token, even with no merge into it.
  EXPECT_EQ(Tokenizer::from_gguf_or_throw(gpt2_vocab("default"), "f").encode("hel", false),
            (Ids{15}));
  GgufTokenizerMetadata m = gpt2_vocab("llama-bpe");
  m.merges->pop_back();  // no merge into "hel"
  EXPECT_EQ(Tokenizer::from_gguf_or_throw(m, "f").encode("hel", false), (Ids{15}));
  m.pre = "default";
  EXPECT_EQ(Tokenizer::from_gguf_or_throw(m, "f").encode("hel", false), (Ids{5, 2}));
  m.pre = "tekken";
  EXPECT_EQ(Tokenizer::from_gguf_or_throw(m, "f").encode("hel", false), (Ids{15}));
  m.pre = "gpt-4o";
  EXPECT_EQ(Tokenizer::from_gguf_or_throw(m, "f").encode("hel", false), (Ids{15}));
}

TEST(GgufVocab, Qwen2NormalizesToNfc) {
  // "é" as e + U+0301 becomes U+00E9 (bytes C3 A9, byte-level "Ã©") before the split.
  GgufTokenizerMetadata m = gpt2_vocab("qwen2");
  for (const char* t : {"\xC3\x83", "\xC2\xA9", "\xC3\x83\xC2\xA9"}) {
    m.tokens.push_back(t);
    m.token_types->push_back(static_cast<int32_t>(T::Normal));
  }
  m.merges->push_back("\xC3\x83 \xC2\xA9");
  EXPECT_EQ(Tokenizer::from_gguf_or_throw(m, "f").encode("e\xCC\x81", false), (Ids{18}));
  m.pre = "default";
  EXPECT_EQ(Tokenizer::from_gguf_or_throw(m, "f").encode("e\xCC\x81", false), (Ids{1}));
}

TEST(SpmMerges, RankedByScoreThenIdThenParts) {
  const std::vector<std::string> tokens = {"a", "b", "c", "ab", "bc", "abc", "ca"};
  const std::vector<float> scores = {0, 0, 0, -2, -1, -3, -1};
  const auto merges = tok::merges_from_scores(tokens, scores);
  ASSERT_EQ(merges.size(), 5u);
  // bc (-1, id 4) and ca (-1, id 6) tie: id order; abc = a+bc (ids 0,4) before ab+c (3,2).
  const std::vector<std::array<int32_t, 3>> expected = {
      {1, 2, 4}, {2, 0, 6}, {0, 1, 3}, {0, 4, 5}, {3, 2, 5}};
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(merges[i].left, expected[i][0]) << i;
    EXPECT_EQ(merges[i].right, expected[i][1]) << i;
    EXPECT_EQ(merges[i].merged, expected[i][2]) << i;
  }
}

// Bad metadata: Error{BadFormat} (or Unsupported) whose message names the file and the key.
void expect_error(const GgufTokenizerMetadata& m, ErrorKind kind, const std::string& key) {
  try {
    Tokenizer::from_gguf_or_throw(m, "dir/model.gguf");
    ADD_FAILURE() << "no error for " << key;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    const std::string what = e.what();
    EXPECT_NE(what.find("dir/model.gguf"), std::string::npos) << what;
    EXPECT_NE(what.find(key), std::string::npos) << what;
  }
}

TEST(GgufVocabErrors, NameTheFileAndKey) {
  {
    GgufTokenizerMetadata m = spm_vocab();
    m.tokens.clear();
    m.scores->clear();
    m.token_types->clear();
    expect_error(m, ErrorKind::BadFormat, "tokenizer.ggml.tokens");
  }
  {
    GgufTokenizerMetadata m = spm_vocab();
    m.model.clear();
    expect_error(m, ErrorKind::BadFormat, "tokenizer.ggml.model");
    m.model = "bert";
    expect_error(m, ErrorKind::Unsupported, "tokenizer.ggml.model");
  }
  {
    GgufTokenizerMetadata m = spm_vocab();
    m.scores->pop_back();
    expect_error(m, ErrorKind::BadFormat, "tokenizer.ggml.scores");
    m.scores.reset();
    expect_error(m, ErrorKind::BadFormat, "tokenizer.ggml.scores");
    m = spm_vocab();
    (*m.scores)[7] = std::nanf("");
    expect_error(m, ErrorKind::BadFormat, "tokenizer.ggml.scores[7]");
  }
  {
    GgufTokenizerMetadata m = spm_vocab();
    m.token_types->push_back(1);
    expect_error(m, ErrorKind::BadFormat, "tokenizer.ggml.token_type");
    m = spm_vocab();
    (*m.token_types)[3] = 9;
    expect_error(m, ErrorKind::BadFormat, "tokenizer.ggml.token_type[3]");
  }
  {
    GgufTokenizerMetadata m = spm_vocab();
    m.bos_id = 18;
    expect_error(m, ErrorKind::BadFormat, "tokenizer.ggml.bos_token_id");
    m = spm_vocab();
    m.eos_id = int64_t{4294967295};
    expect_error(m, ErrorKind::BadFormat, "tokenizer.ggml.eos_token_id");
    m = spm_vocab();
    m.unk_id = -5;
    expect_error(m, ErrorKind::BadFormat, "tokenizer.ggml.unknown_token_id");
    m = spm_vocab();
    m.pad_id = 100;
    expect_error(m, ErrorKind::BadFormat, "tokenizer.ggml.padding_token_id");
    m = spm_vocab();
    m.eot_id = 100;
    expect_error(m, ErrorKind::BadFormat, "tokenizer.ggml.eot_token_id");
  }
  {
    GgufTokenizerMetadata m = spm_vocab();
    m.tokens[6] = std::string(kGgufMaxTokenBytes + 1, 'x');
    expect_error(m, ErrorKind::BadFormat, "tokenizer.ggml.tokens[6]");
  }
  {
    GgufTokenizerMetadata m = gpt2_vocab("default");
    (*m.merges)[1] = "l q";
    expect_error(m, ErrorKind::BadFormat, "tokenizer.ggml.merges[1]");
    (*m.merges)[1] = "e l";  // both parts exist, "el" does not
    expect_error(m, ErrorKind::BadFormat, "tokenizer.ggml.merges[1]");
    (*m.merges)[1] = "ll";
    expect_error(m, ErrorKind::BadFormat, "tokenizer.ggml.merges[1]");
    m.merges.reset();
    expect_error(m, ErrorKind::BadFormat, "tokenizer.ggml.merges");
  }
  {
    GgufTokenizerMetadata m = gpt2_vocab("no-such-pre");
    expect_error(m, ErrorKind::Unsupported, "tokenizer.ggml.pre");
  }
}

TEST(GgufVocabErrors, MinusOneMeansNoSpecialId) {
  GgufTokenizerMetadata m = spm_vocab();
  m.bos_id = -1;
  const Tokenizer tok = Tokenizer::from_gguf_or_throw(m, "spm.gguf");
  EXPECT_EQ(tok.bos_id(), -1);
  EXPECT_EQ(tok.encode("hello", true), (Ids{15}));
}

// The same vocab through a file: Tokenizer::load_or_throw(FILE.gguf) reads the keys with the
// GGUF reader; wrong value types and missing keys name the file and the key.
class GgufFileTest : public ::testing::Test {
 protected:
  std::filesystem::path dir_ =
      std::filesystem::temp_directory_path() / ("gguf_vocab_test_" + std::to_string(::getpid()));
  std::string path_ = (dir_ / "model.gguf").string();
  void SetUp() override { std::filesystem::create_directories(dir_); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  test::GgufTestWriter gpt2_file() {
    const GgufTokenizerMetadata m = gpt2_vocab("default");
    test::GgufTestWriter w;
    w.kv_str("general.architecture", "llama");
    w.kv_str("tokenizer.ggml.model", m.model);
    w.kv_str("tokenizer.ggml.pre", m.pre);
    w.kv_str_array("tokenizer.ggml.tokens", m.tokens);
    w.kv_i32_array("tokenizer.ggml.token_type", *m.token_types);
    w.kv_str_array("tokenizer.ggml.merges", *m.merges);
    w.kv_u32("tokenizer.ggml.eos_token_id", 10);
    w.kv_bool("tokenizer.ggml.add_bos_token", false);
    w.kv_str("tokenizer.chat_template", "{{ messages }}");
    return w;
  }
  std::string load_error(const test::GgufTestWriter& w) {
    w.write(path_);
    try {
      Tokenizer::load_or_throw(path_);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }
};

TEST_F(GgufFileTest, LoadsTheTokenizerFromTheFile) {
  gpt2_file().write(path_);
  const Tokenizer tok = Tokenizer::load_or_throw(path_);
  EXPECT_EQ(tok.encode("hello hello<|end|>", true), (Ids{8, 9, 10}));
  EXPECT_EQ(tok.eos_id(), 10);
  ASSERT_TRUE(tok.chat_template());
  EXPECT_EQ(*tok.chat_template(), "{{ messages }}");
}

TEST_F(GgufFileTest, BadKeysNameTheFileAndKey) {
  test::GgufTestWriter w = gpt2_file();
  w.kv_u32("tokenizer.ggml.bos_token_id", 16);
  std::string what = load_error(w);
  EXPECT_NE(what.find(path_ + ": tokenizer.ggml.bos_token_id"), std::string::npos) << what;

  w = gpt2_file();
  w.kv_f32_array("tokenizer.ggml.scores", {0.0f, 1.0f});
  what = load_error(w);
  EXPECT_NE(what.find(path_ + ": tokenizer.ggml.scores"), std::string::npos) << what;

  test::GgufTestWriter no_tokenizer;
  no_tokenizer.kv_str("general.architecture", "llama");
  what = load_error(no_tokenizer);
  EXPECT_NE(what.find(path_ + ": tokenizer.ggml.model: missing"), std::string::npos) << what;

  test::GgufTestWriter wrong_type;
  wrong_type.kv_str("tokenizer.ggml.model", "gpt2");
  wrong_type.kv_i32_array("tokenizer.ggml.tokens", {1, 2});
  what = load_error(wrong_type);
  EXPECT_NE(what.find(path_), std::string::npos) << what;
  EXPECT_NE(what.find("tokenizer.ggml.tokens"), std::string::npos) << what;
}

TEST_F(GgufFileTest, WithoutTokenizerKeysTheFolderTokenizerJsonServes) {
  test::GgufTestWriter no_tokenizer;
  no_tokenizer.kv_str("general.architecture", "llama");
  no_tokenizer.write(path_);
  std::ofstream(dir_ / "tokenizer.json")
      << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})";
  EXPECT_EQ(Tokenizer::load_or_throw(path_).encode("ab", false), (Ids{2}));
  // A file with tokenizer metadata ignores the folder's tokenizer.json.
  gpt2_file().write(path_);
  EXPECT_EQ(Tokenizer::load_or_throw(path_).encode("hello", false), (Ids{8}));
}

}  // namespace
}  // namespace akv
