// EncodeMemo: encoding with a memo gives exactly encode()'s ids, re-encodes only the segments
// (text between added tokens) it has not seen, keys them by whether they start the input, and
// forgets the ones no encode used for a while.
#include <gtest/gtest.h>

#include <string>

#include "testdata.h"
#include "tokenizer/encode_memo.h"

namespace akv {
namespace {

std::string words(int n, int seed) {
  std::string out;
  for (int i = 0; i < n; ++i) out += " word" + std::to_string((i * 7919 + seed) % 1000) + (i % 13 == 0 ? ".\n" : "");
  return out;
}

// A Llama 3 conversation as its template renders it, one user turn of `n_words` words per turn.
std::string conversation(int n_turns, int n_words) {
  std::string out = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" + words(n_words, 0) + "<|eot_id|>";
  for (int t = 1; t <= n_turns; ++t) {
    out += "<|start_header_id|>user<|end_header_id|>\n\n" + words(n_words, t) + "<|eot_id|>";
    out += "<|start_header_id|>assistant<|end_header_id|>\n\n" + words(20, 100 + t) + "<|eot_id|>";
  }
  return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
}

TEST(EncodeMemo, SameIdsAsEncodeAndOnlyNewSegmentsEncoded) {
  const Tokenizer& tok = test::shared_tokenizer("llama3");
  EncodeMemo memo;
  for (int turns = 1; turns <= 4; ++turns) {
    const std::string text = conversation(turns, 400);
    const auto want = tok.encode(text, false);
    EXPECT_EQ(tok.encode_up_to(text, false, SIZE_MAX, &memo), want) << turns;
    // The system turn and every earlier user turn (and long replies) were encoded before.
    if (turns > 1) {
      EXPECT_EQ(memo.last_hits(), static_cast<std::size_t>(turns)) << turns;
    }
    EXPECT_EQ(tok.encode_up_to(text, false, SIZE_MAX, &memo), want) << turns << " again";
    EXPECT_EQ(memo.last_hits(), static_cast<std::size_t>(turns + 1)) << turns << " again: every long segment";
  }
  EXPECT_GT(memo.n_bytes(), 0u);
}

TEST(EncodeMemo, BoundedEncodeGivesTheSameIdsAsWithoutAMemo) {
  const Tokenizer& tok = test::shared_tokenizer("llama3");
  EncodeMemo memo;
  const std::string text = conversation(3, 400);
  for (std::size_t bound : {std::size_t{50}, std::size_t{700}, std::size_t{5000}}) {
    EXPECT_EQ(tok.encode_up_to(text, false, bound, &memo), tok.encode_up_to(text, false, bound)) << bound;
    EXPECT_EQ(tok.encode_up_to(text, false, bound, &memo), tok.encode_up_to(text, false, bound)) << bound << " again";
  }
}

// SentencePiece-style tokenizers encode a segment that starts the input differently (the
// prepended "▁"): the same text elsewhere must not reuse those ids.
TEST(EncodeMemo, ASegmentAtTheStartIsNotReusedElsewhere) {
  for (const char* name : {"llama2", "llama3"}) {
    const Tokenizer& tok = test::shared_tokenizer(name);
    const std::string body = words(300, 3);
    const std::string after = (std::string(name) == "llama2" ? "<s>" : "<|begin_of_text|>") + body;
    EncodeMemo memo;
    EXPECT_EQ(tok.encode_up_to(body, false, SIZE_MAX, &memo), tok.encode(body, false)) << name;
    EXPECT_EQ(tok.encode_up_to(after, false, SIZE_MAX, &memo), tok.encode(after, false)) << name;
    EXPECT_EQ(memo.last_hits(), 0u) << name;
    EXPECT_EQ(tok.encode_up_to(body, false, SIZE_MAX, &memo), tok.encode(body, false)) << name;
    EXPECT_EQ(memo.last_hits(), 1u) << name;
  }
}

TEST(EncodeMemo, ForgetsSegmentsIdleForMoreThanTheLimit) {
  const Tokenizer& tok = test::shared_tokenizer("llama3");
  EncodeMemo memo;
  const std::string old_text = words(300, 1), other = words(300, 2);
  tok.encode_up_to(old_text, false, SIZE_MAX, &memo);
  const std::size_t one = memo.n_bytes();
  for (int i = 0; i < EncodeMemo::kMaxIdleEncodes; ++i) tok.encode_up_to(other, false, SIZE_MAX, &memo);
  EXPECT_EQ(memo.n_segments(), 2u);
  tok.encode_up_to(other, false, SIZE_MAX, &memo);
  EXPECT_EQ(memo.n_segments(), 1u);  // old_text idle for kMaxIdleEncodes + 1 encodes
  tok.encode_up_to(old_text, false, SIZE_MAX, &memo);
  EXPECT_EQ(memo.last_hits(), 0u);
  EXPECT_EQ(memo.n_segments(), 2u);
  EXPECT_GT(memo.n_bytes(), one);
}

}  // namespace
}  // namespace akv
