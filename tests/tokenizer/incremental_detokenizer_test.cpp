// IncrementalDetokenizer: streamed pieces concatenate to decode() of the whole sequence, every
// piece is valid UTF-8, split characters are held back, special tokens can be skipped.
#include <gtest/gtest.h>

#include "testdata.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/unicode.h"

namespace akv {
namespace {

std::vector<std::string> stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
  IncrementalDetokenizer detok(tok, skip);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(detok.feed(id));
  pieces.push_back(detok.flush());
  return pieces;
}

std::string join(const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) out += p;
  return out;
}

class DetokenizerGoldensTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DetokenizerGoldensTest, StreamEqualsDecodeOnEveryGoldenCase) {
  const Tokenizer& tok = test::shared_tokenizer(GetParam());
  auto golden = test::read_json(test::testdata_path(std::string("goldens/tokenization/") + GetParam() + ".json"));
  for (const auto& c : golden["cases"]) {
    auto ids = c["ids_with_special"].get<std::vector<int32_t>>();
    for (bool skip : {false, true}) {
      auto pieces = stream(tok, ids, skip);
      for (const std::string& p : pieces) EXPECT_TRUE(tok::utf8_is_valid(p)) << c["id"];
      EXPECT_EQ(join(pieces), tok.decode(ids, skip)) << GetParam() << " " << c["id"] << " skip=" << skip;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, DetokenizerGoldensTest,
                         ::testing::Values("llama3", "qwen3", "llama2", "gemma3", "phi3"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

// Llama 2 has no token for the llama emoji: it is four <0xXX> byte-fallback tokens.
TEST(IncrementalDetokenizerTest, ByteFallbackHeldUntilComplete) {
  const Tokenizer& tok = test::shared_tokenizer("llama2");
  auto ids = tok.encode("a \xF0\x9F\xA6\x99 b", false);
  IncrementalDetokenizer detok(tok, false);
  std::string out;
  int n_byte_tokens = 0;
  for (int32_t id : ids) {
    const std::string* text = tok.token_text(id);
    bool is_byte = text != nullptr && text->rfind("<0x", 0) == 0;
    n_byte_tokens += is_byte;
    std::string piece = detok.feed(id);
    if (is_byte && n_byte_tokens < 4) {
      EXPECT_EQ(piece, "") << "emitted part of a character";
    }
    EXPECT_TRUE(tok::utf8_is_valid(piece));
    out += piece;
  }
  out += detok.flush();
  EXPECT_EQ(n_byte_tokens, 4);
  EXPECT_EQ(out, "a \xF0\x9F\xA6\x99 b");
}

// Byte-level BPE: feed the byte tokens of a 4-byte emoji one by one.
TEST(IncrementalDetokenizerTest, ByteLevelSplitCharacterHeldUntilComplete) {
  const Tokenizer& tok = test::shared_tokenizer("qwen3");
  // The single-byte tokens of U+1F999 (their text is GPT-2's byte-to-unicode form).
  std::vector<int32_t> ids;
  for (char byte : std::string("\xF0\x9F\xA6\x99")) {
    std::string text;
    tok::append_byte_level(text, std::string_view(&byte, 1));
    auto id = tok.find_token(text);
    ASSERT_TRUE(id.has_value()) << text;
    ids.push_back(*id);
  }
  IncrementalDetokenizer detok(tok, false);
  EXPECT_EQ(detok.feed(ids[0]), "");
  EXPECT_EQ(detok.feed(ids[1]), "");
  EXPECT_EQ(detok.feed(ids[2]), "");
  EXPECT_EQ(detok.feed(ids[3]), "\xF0\x9F\xA6\x99");
  EXPECT_EQ(detok.flush(), "");
}

TEST(IncrementalDetokenizerTest, SpecialTokensSkipped) {
  const Tokenizer& tok = test::shared_tokenizer("qwen3");
  auto ids = tok.encode("<|im_start|>user\nHi<|im_end|>\n", false);
  EXPECT_EQ(join(stream(tok, ids, true)), "user\nHi\n");
  EXPECT_EQ(join(stream(tok, ids, false)), "<|im_start|>user\nHi<|im_end|>\n");
}

// Llama 2's decoder strips the first token's leading space only at the very start.
TEST(IncrementalDetokenizerTest, LeadingSpaceOnlyStrippedOnce) {
  const Tokenizer& tok = test::shared_tokenizer("llama2");
  auto ids = tok.encode("Hello world  again", true);
  auto pieces = stream(tok, ids, true);
  EXPECT_EQ(join(pieces), "Hello world  again");
}

TEST(IncrementalDetokenizerTest, InvalidBytesDoNotStallForever) {
  const Tokenizer& tok = test::shared_tokenizer("llama2");
  auto lone = tok.find_token("<0xF0>");
  auto a = tok.find_token("a");
  ASSERT_TRUE(lone && a);
  IncrementalDetokenizer detok(tok, false);
  std::string out = detok.feed(*lone);
  for (int i = 0; i < 10; ++i) out += detok.feed(*a);
  EXPECT_NE(out, "");  // the invalid byte is given up on (U+FFFD) and the text flows again
  out += detok.flush();
  EXPECT_EQ(out, tok.decode(std::vector<int32_t>{*lone, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a}, false));
}

}  // namespace
}  // namespace akv
