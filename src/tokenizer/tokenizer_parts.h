// The pipeline stages a Tokenizer owns (internal to the tokenizer library).
#pragma once

#include <memory>
#include <optional>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"

namespace akv::tok {

struct TokenizerParts {
  std::optional<Normalizer> normalizer;
  std::optional<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  AddedVocabulary added;
  PostProcessor post_processor;
  Decoder decoder;
};

}  // namespace akv::tok
