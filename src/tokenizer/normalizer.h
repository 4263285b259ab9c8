// Normalizers of HF tokenizer.json ("normalizer" field): Unicode forms, Replace, Prepend,
// Lowercase, Strip, StripAccents and Sequence. They rewrite a text segment in place; the
// tokenizer applies them to each segment between non-normalized added tokens.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace akv::tok {

struct Normalizer {
  enum class Kind { Unicode, Lowercase, Replace, Prepend, Strip, StripAccents, Sequence };
  Kind kind = Kind::Sequence;
  NormalForm form = NormalForm::Nfc;  // Unicode
  std::string pattern;                // Replace: literal pattern (when regex is null)
  std::shared_ptr<const Regex> regex; // Replace: regex pattern
  std::string content;                // Replace: replacement; Prepend: prefix
  bool strip_left = false, strip_right = false;
  std::vector<Normalizer> children;   // Sequence

  void apply(std::string& text) const;
};

// Parses one normalizer object. Throws Error{BadFormat} naming `where` on malformed input,
// Error{Unsupported} for a type we do not implement (e.g. Precompiled).
Normalizer parse_normalizer(const nlohmann::json& j, const std::string& where);

// Replaces every occurrence of `from` (literal, non-empty) in `text` with `to`.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

// Replaces every regex match in `text` with `to`.
std::string regex_replace_all(std::string_view text, const Regex& regex, std::string_view to);

}  // namespace akv::tok
