// Post-processors of HF tokenizer.json ("post_processor"): TemplateProcessing (BOS/EOS around
// a single sequence), Bert/Roberta (CLS/SEP), ByteLevel (offsets only: no effect on ids), and
// Sequence. Only the single-sequence template is used.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace akv::tok {

struct PostProcessor {
  enum class Kind { None, Template, Sequence };
  Kind kind = Kind::None;
  // Template: the ids before and after the sequence "A".
  std::vector<int32_t> prefix_ids;
  std::vector<int32_t> suffix_ids;
  std::vector<PostProcessor> children;  // Sequence

  // Adds the special tokens around `ids` when add_special_tokens is true.
  void apply(std::vector<int32_t>& ids, bool add_special_tokens) const;
};

// Throws Error{BadFormat} naming `where` (e.g. a template token missing from special_tokens).
PostProcessor parse_post_processor(const nlohmann::json& j, const std::string& where);

}  // namespace akv::tok
