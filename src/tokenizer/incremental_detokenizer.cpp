// Streaming detokenization: decode a small window of ids twice (with and without the newest
// ones) and emit the difference once it no longer ends in an incomplete character.
#include "tokenizer/tokenizer.h"

namespace akv {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";
// A held-back character is complete or truly invalid after this many more ids (a UTF-8
// character has at most 4 bytes and every non-skipped id adds at least one).
constexpr size_t kMaxPendingIds = 6;

bool ends_with_replacement(const std::string& s) {
  return s.size() >= kReplacementChar.size() &&
         s.compare(s.size() - kReplacementChar.size(), kReplacementChar.size(), kReplacementChar) == 0;
}

// The text of new_text after prefix_text. When the newest ids changed how earlier bytes
// decode (a byte-fallback group that had been given up on as U+FFFD and now completes), the
// texts diverge: cut at the next character boundary so the result stays valid UTF-8.
std::string text_after(const std::string& new_text, const std::string& prefix_text) {
  if (new_text.size() <= prefix_text.size()) return "";
  size_t cut = prefix_text.size();
  while (cut < new_text.size() && (static_cast<unsigned char>(new_text[cut]) & 0xC0) == 0x80) ++cut;
  return new_text.substr(cut);
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::feed(int32_t id) {
  if (skip_special_tokens_ && tokenizer_->is_special(id)) return "";
  window_.push_back(id);
  std::span<const int32_t> all(window_);
  std::string prefix_text = tokenizer_->decode(all.first(read_offset_), skip_special_tokens_);
  std::string new_text = tokenizer_->decode(all, skip_special_tokens_);
  bool incomplete = ends_with_replacement(new_text) && window_.size() - read_offset_ < kMaxPendingIds;
  if (incomplete || new_text.size() <= prefix_text.size()) return "";
  std::string delta = text_after(new_text, prefix_text);
  // Keep the last emitted ids as left context for the decoders (e.g. Strip of a leading space).
  window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(read_offset_));
  read_offset_ = window_.size();
  return delta;
}

std::string IncrementalDetokenizer::flush() {
  std::span<const int32_t> all(window_);
  std::string prefix_text = tokenizer_->decode(all.first(read_offset_), skip_special_tokens_);
  std::string new_text = tokenizer_->decode(all, skip_special_tokens_);
  window_.clear();
  read_offset_ = 0;
  return text_after(new_text, prefix_text);
}

}  // namespace akv
