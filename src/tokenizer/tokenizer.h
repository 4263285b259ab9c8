// Text <-> token ids for one model, loaded from Hugging Face tokenizer.json (+ the optional
// tokenizer_config.json) or from a GGUF file's tokenizer metadata. Reproduces HF `tokenizers` encode/decode for byte-level BPE (GPT-2,
// Llama 3, Qwen) and SentencePiece-style BPE (Llama 2, Mistral, Gemma, Phi-3). Not the chat
// template (src/chat) and not the transformers-side clean_up_tokenization_spaces.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/encode_memo.h"

namespace akv {

namespace tok {
struct TokenizerParts;
}
struct GgufTokenizerMetadata;

// The tokenizer_config.json fields the chat layer needs.
struct TokenizerConfig {
  std::string bos_token;                     // "" when the config has none
  std::string eos_token;                     // "" when the config has none
  std::optional<std::string> chat_template;  // the default template, if any
  std::optional<bool> add_bos_token;         // as written in the config
  std::optional<bool> add_eos_token;
};

class Tokenizer {
 public:
  // Reads model_dir/tokenizer.json and, if present, model_dir/tokenizer_config.json (and
  // model_dir/chat_template.jinja when the config has no template); when `model_dir` is a
  // .gguf file, load_gguf_or_throw(model_dir) instead. Throws Error{NotFound, Io} for
  // unreadable files, Error{BadFormat} naming the file and field for malformed JSON,
  // Error{Unsupported} for a model/normalizer/... type not implemented. Expensive (parses
  // the vocab and merges: ~0.1-1 s for 150K-260K vocabularies); load once per model.
  static Tokenizer load_or_throw(const std::string& model_dir);
  // Same from explicit paths; `config_path` may be empty.
  static Tokenizer load_files_or_throw(const std::string& tokenizer_json_path, const std::string& config_path);
  // The tokenizer and chat template of a GGUF file's metadata (the first file of a split
  // set holds it); a file with no tokenizer.ggml.model (converted without its tokenizer)
  // takes the tokenizer.json in its folder when there is one. Throws what the GGUF reader
  // throws, and as from_gguf_or_throw.
  static Tokenizer load_gguf_or_throw(const std::string& gguf_path);
  // From GGUF tokenizer metadata (tokenizer/gguf_vocab.h): tokenizer.ggml.model gpt2 or
  // llama. Throws Error{BadFormat} naming `path` and the key for inconsistent metadata
  // (missing tokens, a count that differs from the tokens', a merge of unknown tokens, a
  // special id outside the vocab, absurd sizes), Error{Unsupported} for another model or an
  // unknown tokenizer.ggml.pre. The same cost as load_or_throw.
  static Tokenizer from_gguf_or_throw(const GgufTokenizerMetadata& metadata, const std::string& path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text`, as HF Tokenizer.encode(text, add_special_tokens).ids. Invalid UTF-8
  // is replaced by U+FFFD first. Thread-safe: any number of threads may encode at once.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;

  // encode() that gives up once the ids pass `max_ids`: then it returns more than `max_ids`
  // ids, and the full encoding is longer than `max_ids` too; they are the full encoding's ids in
  // order, with some words near a cut left out, except the last word's, which may be those of
  // its beginning only. Work stays about `max_ids` tokens' worth, not the text's length: a long
  // segment is first encoded by its prefixes (16 bytes per wanted id, doubling), leaving
  // uncounted the last words before each cut, which the text past it could change; a word
  // longer than BpeModel::max_bytes_per_id() per remaining id is encoded only that far.
  // With a `memo` (tokenizer/encode_memo.h; not null), long segments it holds are not encoded
  // again and the ones encoded whole are remembered: the same ids, work only for new segments.
  std::vector<int32_t> encode_up_to(std::string_view text, bool add_special_tokens, size_t max_ids,
                                    EncodeMemo* memo = nullptr) const;

  // Same ids as encode() through the plain reference BPE (no word cache, O(n^2) merge loop
  // per word). For tests and benchmarks only: much slower on long words.
  std::vector<int32_t> encode_reference(std::string_view text, bool add_special_tokens) const;

  // Text of `ids`, as HF Tokenizer.decode(ids, skip_special_tokens). Ids outside the vocab
  // are skipped. Incomplete UTF-8 at the end becomes U+FFFD (use IncrementalDetokenizer for
  // streaming). Thread-safe.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // Ids of the config's bos_token / eos_token, -1 if none.
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  // The end-of-turn id a GGUF file names (tokenizer.ggml.eot_token_id), -1 if none.
  int32_t eot_id() const { return eot_id_; }
  // The id of an exact token string (added tokens first, then the model vocab).
  std::optional<int32_t> find_token(std::string_view token) const;
  // The stored text of `id` (byte-level or "▁" form for model tokens), nullptr if none.
  const std::string* token_text(int32_t id) const;
  // True for added tokens marked special (what skip_special_tokens removes).
  bool is_special(int32_t id) const;
  // One past the largest id of the model vocab and the added tokens.
  int32_t vocab_size() const;

  const TokenizerConfig& config() const { return config_; }
  const std::string& bos_token() const { return config_.bos_token; }
  const std::string& eos_token() const { return config_.eos_token; }
  const std::optional<std::string>& chat_template() const { return config_.chat_template; }
  // Whether encode(text, true) starts with the BOS id: the config's add_bos_token when set,
  // else whether the post-processor template puts bos_id() first.
  bool add_bos_token() const { return add_bos_token_; }

 private:
  Tokenizer();
  std::vector<int32_t> encode_impl(std::string_view text, bool add_special_tokens, bool reference,
                                   size_t max_ids = SIZE_MAX, EncodeMemo* memo = nullptr) const;
  // Normalizes, splits and encodes one text segment between added tokens, appending to `ids`
  // and stopping once they pass `max_ids`. `cut`: the segment is a prefix cut short, so its last
  // words (which the text past the cut could change) are left out: the ids are then a lower
  // bound, word for word those of the whole segment.
  // Returns the number of words the segment split into (before any was left out).
  size_t encode_segment(std::string_view segment, bool at_input_start, bool reference, bool cut, size_t max_ids,
                        std::vector<int32_t>& ids) const;
  // Whether growing prefixes of `segment` (cut ones) alone take `ids` past `max_ids`; then
  // `ids` holds them.
  bool prefix_passes(std::string_view segment, bool at_input_start, size_t max_ids, std::vector<int32_t>& ids) const;
  std::unique_ptr<tok::TokenizerParts> parts_;
  TokenizerConfig config_;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t eot_id_ = -1;
  bool add_bos_token_ = false;
};

// Streaming detokenizer for one sequence: feed ids one at a time and get back the text that
// became complete. Never returns broken UTF-8: a multi-byte character split across tokens
// (byte-level or <0xXX> byte fallback) is held back until its last byte arrives, and the
// decoders' context (leading-space stripping) matches decode() of the whole sequence.
// Not thread-safe (one per sequence); the Tokenizer must outlive it. Cost per feed: decoding
// a window of a few ids.
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens);

  // Returns the newly complete text (often empty).
  std::string feed(int32_t id);
  // Returns the text still held back (an incomplete character becomes U+FFFD) and resets.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> window_;  // ids from prefix_offset_ on
  size_t read_offset_ = 0;       // index in window_ of the first id not yet emitted
};

}  // namespace akv
