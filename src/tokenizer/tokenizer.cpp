// Encode (added tokens -> normalizer -> pre-tokenizer -> BPE -> post-processor) and decode
// (ids -> token strings -> decoders).
#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "tokenizer/tokenizer_parts.h"
#include "tokenizer/unicode.h"

namespace akv {

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return encode_impl(text, add_special_tokens, false);
}

std::vector<int32_t> Tokenizer::encode_up_to(std::string_view text, bool add_special_tokens, size_t max_ids) const {
  return encode_impl(text, add_special_tokens, false, max_ids);
}

std::vector<int32_t> Tokenizer::encode_reference(std::string_view text, bool add_special_tokens) const {
  return encode_impl(text, add_special_tokens, true);
}

std::vector<int32_t> Tokenizer::encode_impl(std::string_view text, bool add_special_tokens, bool reference,
                                            size_t max_ids) const {
  const tok::TokenizerParts& p = *parts_;
  std::string sanitized;
  if (!tok::utf8_is_valid(text)) {
    sanitized = tok::utf8_lossy(text);
    text = sanitized;
  }
  std::vector<int32_t> ids;
  ids.reserve(std::min(text.size() / 3, max_ids) + 4);
  std::vector<tok::AddedSplit> raw_splits, normalized_splits;
  std::vector<tok::PreToken> words;
  p.added.split(text, false, raw_splits);
  for (const tok::AddedSplit& raw : raw_splits) {
    if (ids.size() > max_ids) return ids;
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    std::string segment(text.substr(raw.begin, raw.end - raw.begin));
    if (p.normalizer) p.normalizer->apply(segment);
    normalized_splits.clear();
    p.added.split(segment, true, normalized_splits);
    for (const tok::AddedSplit& piece : normalized_splits) {
      if (piece.id >= 0) {
        ids.push_back(piece.id);
        continue;
      }
      words.clear();
      words.push_back({segment.substr(piece.begin, piece.end - piece.begin), raw.begin == 0 && piece.begin == 0});
      if (p.pre_tokenizer) p.pre_tokenizer->apply(words);
      for (const tok::PreToken& word : words) {
        if (ids.size() > max_ids) return ids;
        if (word.text.empty()) continue;
        if (reference) p.model->encode_word_reference(word.text, ids);
        else p.model->encode_word(word.text, ids);
      }
    }
  }
  p.post_processor.apply(ids, add_special_tokens);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const tok::TokenizerParts& p = *parts_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const tok::AddedToken* added = p.added.by_id(id)) {
      if (!(skip_special_tokens && added->special)) tokens.push_back(added->content);
    } else if (const std::string* text = p.model->token_of(id)) {
      tokens.push_back(*text);
    }
  }
  if (p.decoder.kind == tok::Decoder::Kind::None) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  p.decoder.apply(tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

std::optional<int32_t> Tokenizer::find_token(std::string_view token) const {
  if (auto id = parts_->added.find(token)) return id;
  return parts_->model->find(token);
}

const std::string* Tokenizer::token_text(int32_t id) const {
  if (const tok::AddedToken* added = parts_->added.by_id(id)) return &added->content;
  return parts_->model->token_of(id);
}

bool Tokenizer::is_special(int32_t id) const { return parts_->added.is_special(id); }

int32_t Tokenizer::vocab_size() const {
  int32_t n = parts_->model->vocab_size();
  for (const tok::AddedToken& t : parts_->added.tokens()) n = std::max(n, t.id + 1);
  return n;
}

}  // namespace akv
