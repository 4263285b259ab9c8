// Pre-tokenizers of HF tokenizer.json ("pre_tokenizer" field): split a normalized segment
// into words that the BPE model encodes independently. ByteLevel also maps bytes to GPT-2's
// printable characters; Metaspace maps ' ' to the replacement character.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/regex.h"

namespace akv::tok {

struct PreToken {
  std::string text;
  bool at_start = false;  // begins at offset 0 of the original input (Metaspace "first")
};

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreTokenizer {
  enum class Kind {
    ByteLevel, Split, Metaspace, Digits, Whitespace, WhitespaceSplit, Punctuation, Bert, Sequence
  };
  enum class PrependScheme { Always, First, Never };

  Kind kind = Kind::Sequence;
  // ByteLevel
  bool add_prefix_space = false;
  bool use_regex = true;
  // Split (literal when regex is null), ByteLevel's regex, Whitespace
  std::shared_ptr<const Regex> regex;
  std::string literal;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  // Metaspace
  std::string replacement = "\xE2\x96\x81";  // U+2581
  PrependScheme prepend_scheme = PrependScheme::Always;
  bool split = true;
  // Digits
  bool individual_digits = false;
  std::vector<PreTokenizer> children;  // Sequence

  // Replaces `pieces` with the pre-tokenized words (empty words are dropped).
  void apply(std::vector<PreToken>& pieces) const;
};

// Throws Error{BadFormat} naming `where`, Error{Unsupported} for unknown types.
PreTokenizer parse_pre_tokenizer(const nlohmann::json& j, const std::string& where);

// The GPT-2 pattern ByteLevel uses when use_regex is true.
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace akv::tok
