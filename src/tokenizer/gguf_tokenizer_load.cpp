// Reading a GGUF file's tokenizer metadata into GgufTokenizerMetadata (the mapping to the
// pipeline is gguf_vocab.cpp's). Only the metadata is read: tensor data stays unmapped pages.
#include <filesystem>

#include "tensor/gguf.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace akv {
namespace {

template <typename T, typename Get>
std::optional<T> find(const GgufMetadata& meta, std::string_view key, Get get) {
  if (!meta.has(key)) return std::nullopt;
  return (meta.*get)(key);
}

GgufTokenizerMetadata read_tokenizer_metadata(const GgufMetadata& meta) {
  GgufTokenizerMetadata m;
  m.model = meta.find_string("tokenizer.ggml.model").value_or("");
  m.pre = meta.find_string("tokenizer.ggml.pre").value_or("");
  if (meta.has("tokenizer.ggml.tokens")) m.tokens = meta.get_string_array("tokenizer.ggml.tokens");
  m.scores = find<std::vector<float>>(meta, "tokenizer.ggml.scores", &GgufMetadata::get_f32_array);
  m.token_types =
      find<std::vector<int32_t>>(meta, "tokenizer.ggml.token_type", &GgufMetadata::get_i32_array);
  m.merges = find<std::vector<std::string>>(meta, "tokenizer.ggml.merges",
                                            &GgufMetadata::get_string_array);
  auto id = [&](const char* key) { return find<int64_t>(meta, key, &GgufMetadata::get_i64); };
  m.bos_id = id("tokenizer.ggml.bos_token_id");
  m.eos_id = id("tokenizer.ggml.eos_token_id");
  m.eot_id = id("tokenizer.ggml.eot_token_id");
  m.eom_id = id("tokenizer.ggml.eom_token_id");
  m.unk_id = id("tokenizer.ggml.unknown_token_id");
  m.sep_id = id("tokenizer.ggml.seperator_token_id");
  m.pad_id = id("tokenizer.ggml.padding_token_id");
  m.add_bos_token = meta.find_bool("tokenizer.ggml.add_bos_token");
  m.add_eos_token = meta.find_bool("tokenizer.ggml.add_eos_token");
  m.add_space_prefix = meta.find_bool("tokenizer.ggml.add_space_prefix");
  m.chat_template = meta.find_string("tokenizer.chat_template");
  return m;
}

}  // namespace

Tokenizer Tokenizer::load_gguf_or_throw(const std::string& gguf_path) {
  const GgufReader reader = GgufReader::open_or_throw(gguf_path);
  if (!reader.metadata().has("tokenizer.ggml.model")) {
    // A model converted without its tokenizer: the tokenizer.json beside it, if any.
    const std::filesystem::path dir = std::filesystem::path(gguf_path).parent_path();
    if (std::filesystem::exists(dir / "tokenizer.json"))
      return load_or_throw(dir.empty() ? "." : dir.string());
  }
  return from_gguf_or_throw(read_tokenizer_metadata(reader.metadata()), gguf_path);
}

}  // namespace akv
