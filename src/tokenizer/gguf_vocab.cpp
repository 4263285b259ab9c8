// GGUF tokenizer metadata -> the pipeline stages a tokenizer.json of the same model describes:
// gpt2 = byte-level BPE with merges and the pre-tokenizer split named by tokenizer.ggml.pre;
// llama = SentencePiece BPE (merges from the scores, <0xNN> byte fallback, spaces as U+2581).
#include <cmath>
#include <unordered_map>

#include "base/error.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/spm_merges.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_parts.h"

namespace akv {
namespace {

using tok::BpeMerge;
using tok::Decoder;
using tok::Normalizer;
using tok::PreTokenizer;

const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

[[noreturn]] void bad(const std::string& path, const std::string& key, const std::string& message) {
  throw Error(ErrorKind::BadFormat, path + ": " + key + ": " + message);
}

// The split of each tokenizer.ggml.pre value, as the model vendors' tokenizer.json write it.
struct PreFamily {
  std::vector<std::string_view> names;
  const char* pattern;  // a Split regex before ByteLevel; nullptr: ByteLevel's GPT-2 regex
  bool nfc;             // an NFC normalizer first
  bool ignore_merges;   // a word that is a token is that token
  bool individual_digits;
};

const std::vector<PreFamily>& pre_families() {
  static const std::vector<PreFamily> families = {
      {{"", "default", "gpt-2", "gpt2", "phi-2"}, nullptr, false, false, false},
      {{"llama3", "llama-v3", "llama-bpe"},
       R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       false,
       true,
       false},
      {{"qwen2", "deepseek-r1-qwen"},
       R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       true,
       false,
       false},
      {{"tekken"},
       R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       false,
       true,
       false},
      {{"gpt-4o"},
       R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
       false,
       true,
       false},
      {{"smollm", "starcoder"}, nullptr, false, false, true},
  };
  return families;
}

const PreFamily& pre_family_or_throw(const std::string& pre, const std::string& path) {
  for (const PreFamily& f : pre_families())
    for (std::string_view name : f.names)
      if (name == pre) return f;
  throw Error(ErrorKind::Unsupported,
              path + ": tokenizer.ggml.pre: pre-tokenizer '" + pre + "' is not supported");
}

// ---- validation --------------------------------------------------------------------------

GgufTokenType type_of(const GgufTokenizerMetadata& m, size_t id) {
  return m.token_types ? static_cast<GgufTokenType>((*m.token_types)[id]) : GgufTokenType::Normal;
}

void check_arrays(const GgufTokenizerMetadata& m, const std::string& path) {
  if (m.model.empty()) bad(path, "tokenizer.ggml.model", "missing");
  if (m.model != "gpt2" && m.model != "llama")
    throw Error(ErrorKind::Unsupported,
                path + ": tokenizer.ggml.model: tokenizer '" + m.model + "' is not supported");
  const size_t n = m.tokens.size();
  if (n == 0) bad(path, "tokenizer.ggml.tokens", "missing or empty");
  if (n > kGgufMaxTokens)
    bad(path, "tokenizer.ggml.tokens", std::to_string(n) + " tokens is more than any vocab has");
  for (size_t id = 0; id < n; ++id)
    if (m.tokens[id].size() > kGgufMaxTokenBytes)
      bad(path, "tokenizer.ggml.tokens[" + std::to_string(id) + "]",
          std::to_string(m.tokens[id].size()) + " bytes");
  if (m.scores) {
    if (m.scores->size() != n)
      bad(path, "tokenizer.ggml.scores",
          std::to_string(m.scores->size()) + " scores for " + std::to_string(n) + " tokens");
    for (size_t id = 0; id < n; ++id)
      if (!std::isfinite((*m.scores)[id]))
        bad(path, "tokenizer.ggml.scores[" + std::to_string(id) + "]", "not finite");
  } else if (m.model == "llama") {
    bad(path, "tokenizer.ggml.scores", "missing (a llama tokenizer merges by score)");
  }
  if (m.token_types) {
    if (m.token_types->size() != n)
      bad(path, "tokenizer.ggml.token_type",
          std::to_string(m.token_types->size()) + " types for " + std::to_string(n) + " tokens");
    for (size_t id = 0; id < n; ++id)
      if ((*m.token_types)[id] < 0 ||
          (*m.token_types)[id] > static_cast<int32_t>(GgufTokenType::Byte))
        bad(path, "tokenizer.ggml.token_type[" + std::to_string(id) + "]",
            "unknown token type " + std::to_string((*m.token_types)[id]));
  }
  if (m.model == "gpt2" && !m.merges)
    bad(path, "tokenizer.ggml.merges", "missing (a gpt2 tokenizer needs merges)");
  if (m.merges && m.merges->size() > kGgufMaxMerges)
    bad(path, "tokenizer.ggml.merges",
        std::to_string(m.merges->size()) + " merges is more than any vocab has");
}

// A stored special id as an id of the vocab: -1 when absent or -1; throws when outside it.
int32_t special_id(const std::optional<int64_t>& id, size_t n_tokens, const std::string& path,
                   const char* key) {
  if (!id || *id == -1) return -1;
  if (*id < 0 || static_cast<uint64_t>(*id) >= n_tokens)
    bad(path, key,
        "id " + std::to_string(*id) + " is outside the vocab of " + std::to_string(n_tokens) +
            " tokens");
  return static_cast<int32_t>(*id);
}

// ---- the model -----------------------------------------------------------------------------

std::vector<BpeMerge> parse_merges(const GgufTokenizerMetadata& m, const std::string& path) {
  std::unordered_map<std::string_view, int32_t> ids;
  ids.reserve(m.tokens.size());
  for (size_t id = 0; id < m.tokens.size(); ++id)
    ids.emplace(m.tokens[id], static_cast<int32_t>(id));
  std::vector<BpeMerge> merges;
  merges.reserve(m.merges->size());
  std::string joined;
  for (size_t rank = 0; rank < m.merges->size(); ++rank) {
    const std::string& entry = (*m.merges)[rank];
    auto key = [rank] { return "tokenizer.ggml.merges[" + std::to_string(rank) + "]"; };
    const size_t space = entry.find(' ', 1);
    if (space == std::string::npos)
      bad(path, key(), "expected \"left right\", got \"" + entry + "\"");
    const std::string_view left = std::string_view(entry).substr(0, space);
    const std::string_view right = std::string_view(entry).substr(space + 1);
    joined.assign(left);
    joined.append(right);
    auto l = ids.find(left), r = ids.find(right), j = ids.find(joined);
    if (l == ids.end() || r == ids.end() || j == ids.end())
      bad(path, key(),
          "merge \"" + entry + "\" refers to a token missing from tokenizer.ggml.tokens");
    merges.push_back({l->second, r->second, j->second});
  }
  return merges;
}

// The token texts as the tokenizer.json vocab has them. The converter writes a SentencePiece
// user-defined token with its U+2581 turned into spaces; they are turned back, so the token is
// matched and merged as tokenizer.json's U+2581 form.
std::vector<std::string> vocab_texts(const GgufTokenizerMetadata& m) {
  std::vector<std::string> texts = m.tokens;
  if (m.model == "llama")
    for (size_t id = 0; id < texts.size(); ++id)
      if (type_of(m, id) == GgufTokenType::UserDefined && texts[id].find(' ') != std::string::npos)
        texts[id] = tok::replace_all(texts[id], " ", kSpace);
  return texts;
}

std::unique_ptr<tok::BpeModel> build_model(const GgufTokenizerMetadata& m,
                                           std::vector<std::string> texts, const PreFamily* family,
                                           int32_t unk_id, const std::string& path) {
  tok::BpeOptions options;
  options.unk_id = unk_id;
  std::vector<BpeMerge> merges;
  if (m.model == "llama") {
    options.byte_fallback = true;
    options.fuse_unk = true;
    merges = tok::merges_from_scores(texts, *m.scores);
  } else {
    options.ignore_merges = family->ignore_merges;
    merges = parse_merges(m, path);
  }
  return tok::BpeModel::build_or_throw(std::move(texts), merges, options,
                                       path + ": tokenizer.ggml");
}

// ---- the other stages ------------------------------------------------------------------------

Normalizer replace_spaces() {
  Normalizer n;
  n.kind = Normalizer::Kind::Replace;
  n.pattern = " ";
  n.content = kSpace;
  return n;
}

// gpt2: [NFC] + [Digits] + [Split(regex)] + ByteLevel; llama: none (spaces are the normalizer's).
void set_pre_tokenizer(tok::TokenizerParts& p, const PreFamily& f, const std::string& path) {
  PreTokenizer seq;
  seq.kind = PreTokenizer::Kind::Sequence;
  if (f.individual_digits) {
    PreTokenizer digits;
    digits.kind = PreTokenizer::Kind::Digits;
    digits.individual_digits = true;
    seq.children.push_back(std::move(digits));
  }
  if (f.pattern != nullptr) {
    PreTokenizer split;
    split.kind = PreTokenizer::Kind::Split;
    split.regex = tok::Regex::compile_or_throw(f.pattern, path + ": tokenizer.ggml.pre");
    split.behavior = tok::SplitBehavior::Isolated;
    seq.children.push_back(std::move(split));
  }
  PreTokenizer byte_level;
  byte_level.kind = PreTokenizer::Kind::ByteLevel;
  byte_level.add_prefix_space = false;
  byte_level.use_regex = f.pattern == nullptr;
  if (byte_level.use_regex)
    byte_level.regex = tok::Regex::compile_or_throw(tok::kGpt2Pattern, path);
  seq.children.push_back(std::move(byte_level));
  p.pre_tokenizer = std::move(seq);
  if (f.nfc) {
    Normalizer nfc;
    nfc.kind = Normalizer::Kind::Unicode;
    nfc.form = tok::NormalForm::Nfc;
    p.normalizer = std::move(nfc);
  }
  p.decoder.kind = Decoder::Kind::ByteLevel;
}

// SentencePiece: " " -> U+2581 (and one before each text piece when add_space_prefix), undone
// by the decoder, which also turns <0xNN> runs back into bytes.
void set_spm_stages(tok::TokenizerParts& p, bool add_space_prefix) {
  Normalizer seq;
  seq.kind = Normalizer::Kind::Sequence;
  if (add_space_prefix) {
    Normalizer prepend;
    prepend.kind = Normalizer::Kind::Prepend;
    prepend.content = kSpace;
    seq.children.push_back(std::move(prepend));
  }
  seq.children.push_back(replace_spaces());
  p.normalizer = std::move(seq);

  Decoder& d = p.decoder;
  d.kind = Decoder::Kind::Sequence;
  Decoder replace;
  replace.kind = Decoder::Kind::Replace;
  replace.pattern = kSpace;
  replace.content = " ";
  d.children.push_back(std::move(replace));
  d.children.emplace_back().kind = Decoder::Kind::ByteFallback;
  d.children.emplace_back().kind = Decoder::Kind::Fuse;
  if (add_space_prefix) {
    Decoder strip;
    strip.kind = Decoder::Kind::Strip;
    strip.content = " ";
    strip.strip_start = 1;
    d.children.push_back(std::move(strip));
  }
}

// Control, user-defined and unknown tokens are matched in the raw text before BPE, as llama.cpp
// and the converters' tokenizer.json do; user-defined ones are not special (decode keeps them).
std::vector<tok::AddedToken> added_tokens(const GgufTokenizerMetadata& m,
                                          const std::vector<std::string>& texts) {
  std::vector<tok::AddedToken> out;
  for (size_t id = 0; id < texts.size(); ++id) {
    const GgufTokenType type = type_of(m, id);
    if (texts[id].empty() || (type != GgufTokenType::Control &&
                              type != GgufTokenType::UserDefined && type != GgufTokenType::Unknown))
      continue;
    tok::AddedToken t;
    t.id = static_cast<int32_t>(id);
    t.content = texts[id];
    t.special = type != GgufTokenType::UserDefined;
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

Tokenizer Tokenizer::from_gguf_or_throw(const GgufTokenizerMetadata& m, const std::string& path) {
  check_arrays(m, path);
  const size_t n = m.tokens.size();
  const int32_t bos = special_id(m.bos_id, n, path, "tokenizer.ggml.bos_token_id");
  const int32_t eos = special_id(m.eos_id, n, path, "tokenizer.ggml.eos_token_id");
  const int32_t eot = special_id(m.eot_id, n, path, "tokenizer.ggml.eot_token_id");
  special_id(m.eom_id, n, path, "tokenizer.ggml.eom_token_id");
  special_id(m.sep_id, n, path, "tokenizer.ggml.seperator_token_id");
  special_id(m.pad_id, n, path, "tokenizer.ggml.padding_token_id");
  int32_t unk = special_id(m.unk_id, n, path, "tokenizer.ggml.unknown_token_id");
  if (unk < 0)
    for (size_t id = 0; id < n && unk < 0; ++id)
      if (type_of(m, id) == GgufTokenType::Unknown) unk = static_cast<int32_t>(id);

  const bool spm = m.model == "llama";
  const PreFamily* family = spm ? nullptr : &pre_family_or_throw(m.pre, path);
  Tokenizer t;
  t.parts_ = std::make_unique<tok::TokenizerParts>();
  tok::TokenizerParts& p = *t.parts_;
  std::vector<std::string> texts = vocab_texts(m);
  p.added = tok::AddedVocabulary::build(added_tokens(m, texts), nullptr);
  p.model = build_model(m, std::move(texts), family, unk, path);
  if (spm)
    set_spm_stages(p, m.add_space_prefix.value_or(true));
  else
    set_pre_tokenizer(p, *family, path);

  const bool add_bos = m.add_bos_token.value_or(spm) && bos >= 0;
  const bool add_eos = m.add_eos_token.value_or(false) && eos >= 0;
  p.post_processor.kind = tok::PostProcessor::Kind::Template;
  if (add_bos) p.post_processor.prefix_ids.push_back(bos);
  if (add_eos) p.post_processor.suffix_ids.push_back(eos);

  if (bos >= 0) t.config_.bos_token = m.tokens[bos];
  if (eos >= 0) t.config_.eos_token = m.tokens[eos];
  t.config_.chat_template = m.chat_template;
  t.config_.add_bos_token = m.add_bos_token;
  t.config_.add_eos_token = m.add_eos_token;
  t.bos_id_ = bos;
  t.eos_id_ = eos;
  t.eot_id_ = eot;
  t.add_bos_token_ = add_bos;
  return t;
}

}  // namespace akv
