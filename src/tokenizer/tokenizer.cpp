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

std::vector<int32_t> Tokenizer::encode_up_to(std::string_view text, bool add_special_tokens, size_t max_ids,
                                             EncodeMemo* memo) const {
  if (memo == nullptr) return encode_impl(text, add_special_tokens, false, max_ids);
  memo->begin();
  std::vector<int32_t> ids = encode_impl(text, add_special_tokens, false, max_ids, memo);
  memo->end();
  return ids;
}

std::vector<int32_t> Tokenizer::encode_reference(std::string_view text, bool add_special_tokens) const {
  return encode_impl(text, add_special_tokens, true);
}

namespace {

// Bytes of text per wanted id in the first prefix encode_up_to() tries (ordinary text takes 2-5).
constexpr size_t kPrefixBytesPerId = 16;
// Words at the end of a cut prefix left uncounted: the text past the cut can change how the
// last characters normalize and split (a greedy run, a lookahead, a composing mark).
constexpr size_t kUncertainWords = 3;

}  // namespace

size_t Tokenizer::encode_segment(std::string_view raw, bool at_input_start, bool reference, bool cut, size_t max_ids,
                                 std::vector<int32_t>& ids) const {
  const tok::TokenizerParts& p = *parts_;
  std::string segment(raw);
  if (p.normalizer) p.normalizer->apply(segment);
  std::vector<tok::AddedSplit> pieces;
  p.added.split(segment, true, pieces);
  // Cut: the last text piece loses its last words, and the added tokens after it are dropped.
  size_t last_text = pieces.size();
  if (cut)
    for (size_t i = 0; i < pieces.size(); ++i)
      if (pieces[i].id < 0) last_text = i;
  if (cut && last_text == pieces.size()) return 0;  // only added tokens: none is certain
  size_t n_words = 0;
  std::vector<tok::PreToken> words;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const tok::AddedSplit& piece = pieces[i];
    if (cut && i > last_text) break;
    const bool last = cut && i == last_text;
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      continue;
    }
    words.clear();
    words.push_back({segment.substr(piece.begin, piece.end - piece.begin), at_input_start && piece.begin == 0});
    if (p.pre_tokenizer) p.pre_tokenizer->apply(words);
    n_words += words.size();
    const size_t n_kept = last ? words.size() - std::min(words.size(), kUncertainWords) : words.size();
    for (size_t w = 0; w < n_kept; ++w) {
      if (ids.size() > max_ids) return n_words;
      std::string_view word = words[w].text;
      if (word.empty()) continue;
      // A word too long to fit (one giant word where nothing splits the text): its beginning
      // alone passes the bound, so only that much is encoded.
      const size_t per_id = p.model->max_bytes_per_id();
      if (max_ids != SIZE_MAX && per_id > 0 && word.size() / per_id > max_ids - ids.size() + 1) {
        size_t end = (max_ids - ids.size() + 2) * per_id;
        while (end > 0 && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) --end;  // a character boundary
        word = word.substr(0, end);
      }
      if (reference) p.model->encode_word_reference(word, ids);
      else p.model->encode_word(word, ids);
    }
  }
  return n_words;
}

bool Tokenizer::prefix_passes(std::string_view segment, bool at_input_start, size_t max_ids,
                              std::vector<int32_t>& ids) const {
  const size_t wanted = max_ids + 1 - std::min(ids.size(), max_ids + 1);
  if (wanted > segment.size() / kPrefixBytesPerId) return false;
  for (size_t n = wanted * kPrefixBytesPerId; n < segment.size(); n *= 2) {
    size_t cut = n;
    while (cut > 0 && (static_cast<unsigned char>(segment[cut]) & 0xC0) == 0x80) --cut;  // a character boundary
    std::vector<int32_t> trial = ids;
    const size_t n_words = encode_segment(segment.substr(0, cut), at_input_start, false, /*cut=*/true, max_ids, trial);
    if (trial.size() > max_ids) {
      ids = std::move(trial);
      return true;
    }
    if (n_words <= kUncertainWords) return false;  // nothing splits this text: no prefix will help
  }
  return false;
}

std::vector<int32_t> Tokenizer::encode_impl(std::string_view text, bool add_special_tokens, bool reference,
                                            size_t max_ids, EncodeMemo* memo) const {
  const tok::TokenizerParts& p = *parts_;
  std::string sanitized;
  if (!tok::utf8_is_valid(text)) {
    sanitized = tok::utf8_lossy(text);
    text = sanitized;
  }
  std::vector<int32_t> ids;
  ids.reserve(std::min(text.size() / 3, max_ids) + 4);
  std::vector<tok::AddedSplit> raw_splits;
  p.added.split(text, false, raw_splits);
  for (const tok::AddedSplit& raw : raw_splits) {
    if (ids.size() > max_ids) return ids;
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    const std::string_view segment = text.substr(raw.begin, raw.end - raw.begin);
    const bool memo_it = memo != nullptr && segment.size() >= EncodeMemo::kMinSegmentBytes;
    if (memo_it && memo->find(segment, raw.begin == 0, ids)) continue;
    // Bounded: a long segment is first tried by its prefixes, so normalizing and splitting all
    // of a huge text is skipped when a part of it already passes the bound.
    if (max_ids != SIZE_MAX && prefix_passes(segment, raw.begin == 0, max_ids, ids)) return ids;
    const size_t first = ids.size();
    encode_segment(segment, raw.begin == 0, reference, /*cut=*/false, max_ids, ids);
    if (memo_it && ids.size() <= max_ids)  // encoded whole (past the bound it may stop early)
      memo->put(segment, raw.begin == 0, {ids.begin() + static_cast<std::ptrdiff_t>(first), ids.end()});
  }
  if (ids.size() > max_ids) return ids;
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
