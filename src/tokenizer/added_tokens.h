// Added tokens of HF tokenizer.json ("added_tokens"): special and user tokens matched
// leftmost-longest in the text before BPE, with lstrip/rstrip/single_word/normalized flags.
// Tokens with normalized=false are matched in the raw text, the others (their content run
// through the normalizer first) in each normalized segment.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/bpe.h"

namespace akv::tok {

struct Normalizer;

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// A piece of text after added-token matching: an added token (id >= 0) or a text range.
struct AddedSplit {
  int32_t id;
  size_t begin, end;
};

class AddedVocabulary {
 public:
  // Parses the "added_tokens" array and builds both matchers; `normalizer` (may be null)
  // rewrites the content of normalized tokens. Throws Error{BadFormat} naming `where`.
  static AddedVocabulary parse_or_throw(const nlohmann::json& tokens, const Normalizer* normalizer,
                                        const std::string& where);
  // From tokens already checked (id >= 0, content not empty), in priority order.
  static AddedVocabulary build(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // Splits `text` by the raw (normalized == false) or the normalized tokens.
  void split(std::string_view text, bool normalized_tokens, std::vector<AddedSplit>& out) const;

  std::optional<int32_t> find(std::string_view content) const;
  const AddedToken* by_id(int32_t id) const;
  bool is_special(int32_t id) const {
    const AddedToken* t = by_id(id);
    return t != nullptr && t->special;
  }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  void add(AddedToken token, const Normalizer* normalizer);

  // A byte trie over one set of token texts; leftmost-longest matching.
  struct Trie {
    std::unordered_map<uint64_t, int32_t> edges;  // (node << 8 | byte) -> child node
    std::vector<int32_t> terminal;                // node -> index into tokens_, or -1
    std::array<bool, 256> first_byte{};
    void insert(std::string_view text, int32_t token_index);
    // Longest token starting at text[pos]: its index and length, or {-1, 0}.
    std::pair<int32_t, size_t> longest_at(std::string_view text, size_t pos) const;
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  StringIdMap by_content_;
  Trie raw_trie_;
  Trie normalized_trie_;
};

}  // namespace akv::tok
