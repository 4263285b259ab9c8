// Decoders of HF tokenizer.json ("decoder"): turn token strings back into text. ByteLevel,
// Metaspace, ByteFallback, Fuse, Strip, Replace, BPEDecoder and Sequence, each a pass over
// the list of token strings (HF decode_chain semantics).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/regex.h"

namespace akv::tok {

struct Decoder {
  enum class Kind { None, ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, BpeSuffix, Sequence };
  Kind kind = Kind::None;
  std::string replacement = "\xE2\x96\x81";  // Metaspace
  bool prepend = true;                        // Metaspace: prepend_scheme != never
  std::string content;                        // Strip: the character; Replace: replacement
  int strip_start = 0, strip_stop = 0;        // Strip
  std::string pattern;                        // Replace: literal (when regex is null); BpeSuffix
  std::shared_ptr<const Regex> regex;         // Replace: regex
  std::vector<Decoder> children;              // Sequence

  void apply(std::vector<std::string>& tokens) const;
};

// Throws Error{BadFormat} naming `where`, Error{Unsupported} for unknown types.
Decoder parse_decoder(const nlohmann::json& j, const std::string& where);

}  // namespace akv::tok
