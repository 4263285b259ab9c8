// The merge list of a SentencePiece BPE vocab, which stores scores instead of merges (GGUF
// tokenizer.ggml.model "llama"). Derived as transformers' SentencePieceExtractor does, so a GGUF
// vocab merges exactly as the tokenizer.json converted from the same SentencePiece model.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "tokenizer/bpe.h"

namespace akv::tok {

// Every split of a token, at a character boundary, into two tokens of the vocab is a merge
// into it. Merges are ranked by the merged token's score, highest first; equal scores keep id
// order; the splits of one token are ordered by the ids of their left then right parts. Of two
// equal token texts only the lower id counts. `scores` holds one finite score per token.
// Cost: one hash lookup per character of the vocab, then a sort of the merges.
std::vector<BpeMerge> merges_from_scores(std::span<const std::string> tokens,
                                         std::span<const float> scores);

}  // namespace akv::tok
