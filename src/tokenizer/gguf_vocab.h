// The tokenizer metadata of a GGUF file (tokenizer.ggml.*, tokenizer.chat_template) as plain
// values: what Tokenizer::from_gguf_or_throw maps to the tokenizer.json pipeline, so the mapping
// is testable without files. gguf_tokenizer_load.cpp fills it from a file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace akv {

// tokenizer.ggml.token_type values.
enum class GgufTokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

struct GgufTokenizerMetadata {
  std::string model;                // tokenizer.ggml.model: "gpt2" or "llama"; "" if absent
  std::string pre;                  // tokenizer.ggml.pre; "" if absent
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens, indexed by id
  std::optional<std::vector<float>> scores;         // tokenizer.ggml.scores
  std::optional<std::vector<int32_t>> token_types;  // tokenizer.ggml.token_type (GgufTokenType)
  // tokenizer.ggml.merges: "left right", in rank order.
  std::optional<std::vector<std::string>> merges;
  // Special ids as stored (any integer type, widened); -1 means none.
  std::optional<int64_t> bos_id;             // tokenizer.ggml.bos_token_id
  std::optional<int64_t> eos_id;             // tokenizer.ggml.eos_token_id
  std::optional<int64_t> eot_id;             // tokenizer.ggml.eot_token_id
  std::optional<int64_t> eom_id;             // tokenizer.ggml.eom_token_id
  std::optional<int64_t> unk_id;             // tokenizer.ggml.unknown_token_id
  std::optional<int64_t> sep_id;             // tokenizer.ggml.seperator_token_id (sic)
  std::optional<int64_t> pad_id;             // tokenizer.ggml.padding_token_id
  std::optional<bool> add_bos_token;         // tokenizer.ggml.add_bos_token
  std::optional<bool> add_eos_token;         // tokenizer.ggml.add_eos_token
  std::optional<bool> add_space_prefix;      // tokenizer.ggml.add_space_prefix (llama model)
  std::optional<std::string> chat_template;  // tokenizer.chat_template
};

// Limits past which metadata is rejected as corrupt rather than allocated.
inline constexpr size_t kGgufMaxTokens = size_t{1} << 24;
inline constexpr size_t kGgufMaxMerges = size_t{1} << 26;
inline constexpr size_t kGgufMaxTokenBytes = size_t{1} << 16;

}  // namespace akv
