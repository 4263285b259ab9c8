// Pipeline stages on small hand-written tokenizer.json files: added-token flags, split
// behaviors, normalizers, decoders, and the errors for malformed files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "tokenizer/tokenizer.h"

namespace akv {
namespace {

namespace fs = std::filesystem;
// A character-level BPE over a few letters, marks and digits; merges "a b", "a x", "x a", "x x".
std::string char_vocab_json(const std::string& normalizer, const std::string& pre_tokenizer,
                            const std::string& added, const std::string& decoder) {
  std::string vocab = "\"<unk>\": 0, \"ab\": 1, \"ax\": 2, \"xa\": 3, \"xx\": 4";
  int id = 5;
  for (std::string c : {"a", "b", "c", "d", "x", "y", " ", "\xE2\x96\x81", "1", "2", "3", "!", "<", ">", "A", "B",
                        "\xC3\xA9", "e", "\xCC\x81", "f", "i"}) {
    vocab += ", \"" + c + "\": " + std::to_string(id++);
  }
  return "{\"added_tokens\": [" + added + "], \"normalizer\": " + normalizer + ", \"pre_tokenizer\": " +
         pre_tokenizer + ", \"post_processor\": null, \"decoder\": " + decoder +
         ", \"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": true, \"vocab\": {" + vocab +
         "}, \"merges\": [[\"a\", \"b\"], [\"a\", \"x\"], [\"x\", \"a\"], [\"x\", \"x\"]]}}";
}

std::string write_temp(const std::string& name, const std::string& text) {
  fs::path dir = fs::path(::testing::TempDir()) / "akv_tokenizer_pipeline" / name;
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << text;
  return dir.string();
}

Tokenizer load_json(const std::string& name, const std::string& text) {
  return Tokenizer::load_or_throw(write_temp(name, text));
}

std::vector<std::string> tokens_of(const Tokenizer& tok, std::string_view text) {
  std::vector<std::string> out;
  for (int32_t id : tok.encode(text, false)) out.push_back(*tok.token_text(id));
  return out;
}

using Strings = std::vector<std::string>;

TEST(PipelineTest, MergesAndFusedUnk) {
  Tokenizer tok = load_json("merges", char_vocab_json("null", "null", "", "null"));
  EXPECT_EQ(tokens_of(tok, "abzzc"), (Strings{"ab", "<unk>", "c"}));
}

TEST(PipelineTest, AddedTokenFlags) {
  std::string added =
      R"({"id": 100, "content": "<x>", "special": true, "lstrip": true, "rstrip": false, "single_word": false, "normalized": false},
         {"id": 101, "content": "<y>", "special": false, "lstrip": false, "rstrip": true, "single_word": false, "normalized": false},
         {"id": 102, "content": "cd", "special": false, "lstrip": false, "rstrip": false, "single_word": true, "normalized": false})";
  Tokenizer tok = load_json("added", char_vocab_json("null", "null", added, "null"));
  EXPECT_EQ(tokens_of(tok, "a  <x>b"), (Strings{"a", "<x>", "b"}));  // lstrip eats the spaces
  EXPECT_EQ(tokens_of(tok, "a<y>  b"), (Strings{"a", "<y>", "b"}));  // rstrip eats the spaces
  EXPECT_EQ(tokens_of(tok, "cd a"), (Strings{"cd", " ", "a"}));      // a whole word
  EXPECT_EQ(tokens_of(tok, "acd"), (Strings{"a", "c", "d"}));        // inside a word: not matched
  EXPECT_TRUE(tok.is_special(100));
  EXPECT_FALSE(tok.is_special(101));
  EXPECT_EQ(tok.decode(tok.encode("a<x>b", false), true), "a b");    // no decoder: tokens joined by ' '
}

TEST(PipelineTest, SplitBehaviors) {
  auto split = [](const char* behavior) {
    return std::string(R"({"type": "Split", "pattern": {"String": "x"}, "invert": false, "behavior": ")") + behavior + "\"}";
  };
  auto words = [&](const char* behavior) {
    // The merge "a b" only happens inside one word, so words show up as "ab" vs "a","b".
    Tokenizer tok = load_json(std::string("split_") + behavior, char_vocab_json("null", split(behavior), "", "null"));
    return tokens_of(tok, "axbxxab");
  };
  EXPECT_EQ(words("Removed"), (Strings{"a", "b", "ab"}));                      // a|b|ab
  EXPECT_EQ(words("Isolated"), (Strings{"a", "x", "b", "x", "x", "ab"}));       // a|x|b|x|x|ab
  EXPECT_EQ(words("Contiguous"), (Strings{"a", "x", "b", "xx", "ab"}));         // a|x|b|xx|ab
  EXPECT_EQ(words("MergedWithPrevious"), (Strings{"ax", "b", "x", "x", "ab"}));  // ax|bx|x|ab
  EXPECT_EQ(words("MergedWithNext"), (Strings{"a", "x", "b", "x", "x", "ab"}));  // a|xb|x|xab
}

TEST(PipelineTest, DigitsAndMetaspace) {
  Tokenizer digits = load_json("digits", char_vocab_json("null", R"({"type": "Digits", "individual_digits": false})", "", "null"));
  EXPECT_EQ(tokens_of(digits, "a12b"), (Strings{"a", "1", "2", "b"}));
  std::string meta = R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true})";
  std::string meta_dec = R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true})";
  Tokenizer tok = load_json("metaspace", char_vocab_json("null", meta, "", meta_dec));
  EXPECT_EQ(tokens_of(tok, "ab c"), (Strings{"\xE2\x96\x81", "ab", "\xE2\x96\x81", "c"}));
  EXPECT_EQ(tok.decode(tok.encode("ab c", false), false), "ab c");
}

TEST(PipelineTest, Normalizers) {
  Tokenizer nfc = load_json("nfc", char_vocab_json(R"({"type": "NFC"})", "null", "", "null"));
  EXPECT_EQ(tokens_of(nfc, "e\xCC\x81"), (Strings{"\xC3\xA9"}));
  Tokenizer nfd = load_json("nfd", char_vocab_json(R"({"type": "NFD"})", "null", "", "null"));
  EXPECT_EQ(tokens_of(nfd, "\xC3\xA9"), (Strings{"e", "\xCC\x81"}));
  Tokenizer nfkc = load_json("nfkc", char_vocab_json(R"({"type": "NFKC"})", "null", "", "null"));
  EXPECT_EQ(tokens_of(nfkc, "\xEF\xAC\x81"), (Strings{"f", "i"}));  // U+FB01 ligature
  Tokenizer seq = load_json("seq", char_vocab_json(
      R"({"type": "Sequence", "normalizers": [{"type": "Lowercase"}, {"type": "Strip", "strip_left": true, "strip_right": true},
          {"type": "Replace", "pattern": {"Regex": "[0-9]+"}, "content": "!"}, {"type": "Prepend", "prepend": "<"}]})",
      "null", "", "null"));
  EXPECT_EQ(tokens_of(seq, "  AB12 "), (Strings{"<", "ab", "!"}));
}

TEST(PipelineTest, DecoderChain) {
  std::string dec = R"({"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 1}]})";
  Tokenizer tok = load_json("decoder", char_vocab_json("null", "null", "", dec));
  auto id = [&](const char* t) { return *tok.find_token(t); };
  std::vector<int32_t> ids = {id("\xE2\x96\x81"), id("a"), id("\xE2\x96\x81"), id("b"), id(" ")};
  EXPECT_EQ(tok.decode(ids, false), "a b");
}

void expect_error(const std::string& name, const std::string& json, ErrorKind kind, const std::string& needle) {
  try {
    load_json(name, json);
    ADD_FAILURE() << name << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << name << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << name << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << name << ": " << e.what();
  }
}

TEST(PipelineTest, MalformedFilesNameFileAndField) {
  expect_error("not_json", "{\"model\": ", ErrorKind::BadFormat, "not valid JSON");
  expect_error("no_model", "{\"added_tokens\": []}", ErrorKind::BadFormat, "model");
  std::string bad_merge = char_vocab_json("null", "null", "", "null");
  bad_merge.replace(bad_merge.find("[[\"a\", \"b\"]"), 11, "[\"a q\"");
  expect_error("bad_merge", bad_merge, ErrorKind::BadFormat, "model.merges[0]");
  expect_error("bad_regex", char_vocab_json("null", R"({"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated"})", "", "null"),
               ErrorKind::BadFormat, "pre_tokenizer.pattern.Regex");
  expect_error("unsupported", char_vocab_json(R"({"type": "Precompiled"})", "null", "", "null"), ErrorKind::Unsupported,
               "normalizer");
  expect_error("bad_added", char_vocab_json("null", "null", R"({"content": "<z>"})", "null"), ErrorKind::BadFormat,
               "added_tokens[0].id");
  expect_error("bad_behavior", char_vocab_json("null", R"({"type": "Split", "pattern": {"String": "x"}, "behavior": "Sideways"})", "", "null"),
               ErrorKind::BadFormat, "behavior");
  try {
    Tokenizer::load_or_throw((fs::path(::testing::TempDir()) / "akv_no_such_dir").string());
    ADD_FAILURE() << "no error for a missing directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotFound) << e.what();
  }
}

TEST(PipelineTest, ConfigFields) {
  std::string dir = write_temp("config", char_vocab_json("null", "null",
      R"({"id": 100, "content": "<s>", "special": true, "normalized": false})", "null"));
  std::ofstream(fs::path(dir) / "tokenizer_config.json")
      << R"({"bos_token": {"content": "<s>", "__type": "AddedToken"}, "eos_token": null, "add_bos_token": true,
            "chat_template": [{"name": "default", "template": "{{ x }}"}, {"name": "tool_use", "template": "t"}]})";
  Tokenizer tok = Tokenizer::load_or_throw(dir);
  EXPECT_EQ(tok.bos_token(), "<s>");
  EXPECT_EQ(tok.bos_id(), 100);
  EXPECT_EQ(tok.eos_id(), -1);
  EXPECT_TRUE(tok.add_bos_token());
  ASSERT_TRUE(tok.chat_template().has_value());
  EXPECT_EQ(*tok.chat_template(), "{{ x }}");
  std::ofstream(fs::path(dir) / "tokenizer_config.json") << R"({"add_bos_token": "yes"})";
  EXPECT_THROW(Tokenizer::load_or_throw(dir), Error);
}

}  // namespace
}  // namespace akv
