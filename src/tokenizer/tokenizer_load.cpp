// Loading: tokenizer.json into the pipeline stages, tokenizer_config.json into TokenizerConfig.
#include <filesystem>

#include "base/error.h"
#include "base/mapped_file.h"
#include "tokenizer/json_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_parts.h"

namespace akv {
namespace {

using tok::Json;

Json parse_json_or_throw(const std::string& text, const std::string& path) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw Error(ErrorKind::BadFormat, path + ": not valid JSON: " + e.what());
  }
}

std::unique_ptr<tok::TokenizerParts> parse_tokenizer_json(const Json& j, const std::string& path) {
  if (!j.is_object()) throw Error(ErrorKind::BadFormat, path + ": expected a JSON object");
  auto parts = std::make_unique<tok::TokenizerParts>();
  auto field = [&](const char* key) -> const Json& {
    static const Json null_json;
    auto it = j.find(key);
    return it == j.end() ? null_json : *it;
  };
  if (!field("normalizer").is_null())
    parts->normalizer = tok::parse_normalizer(field("normalizer"), path + ": normalizer");
  if (!field("pre_tokenizer").is_null())
    parts->pre_tokenizer = tok::parse_pre_tokenizer(field("pre_tokenizer"), path + ": pre_tokenizer");
  if (!field("model").is_object()) throw Error(ErrorKind::BadFormat, path + ": model: missing or not an object");
  parts->model = tok::BpeModel::parse_or_throw(field("model"), path + ": model");
  parts->added = tok::AddedVocabulary::parse_or_throw(
      field("added_tokens"), parts->normalizer ? &*parts->normalizer : nullptr, path + ": added_tokens");
  parts->post_processor = tok::parse_post_processor(field("post_processor"), path + ": post_processor");
  parts->decoder = tok::parse_decoder(field("decoder"), path + ": decoder");
  return parts;
}

// bos_token and friends are a string, null, or an AddedToken object {"content": ...}.
std::string token_field(const Json& j, const char* key, const std::string& path) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  throw Error(ErrorKind::BadFormat, path + ": " + key + ": expected a string or {\"content\": ...}");
}

std::optional<std::string> chat_template_field(const Json& j, const std::string& path) {
  auto it = j.find("chat_template");
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {  // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
    for (const Json& entry : *it)
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string())
        return entry["template"].get<std::string>();
    return std::nullopt;
  }
  throw Error(ErrorKind::BadFormat, path + ": chat_template: expected a string or a list of named templates");
}

TokenizerConfig parse_config(const Json& j, const std::string& path) {
  if (!j.is_object()) throw Error(ErrorKind::BadFormat, path + ": expected a JSON object");
  TokenizerConfig c;
  c.bos_token = token_field(j, "bos_token", path);
  c.eos_token = token_field(j, "eos_token", path);
  c.chat_template = chat_template_field(j, path);
  for (auto [key, out] : {std::pair{"add_bos_token", &c.add_bos_token}, std::pair{"add_eos_token", &c.add_eos_token}}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_boolean()) throw Error(ErrorKind::BadFormat, path + ": " + key + ": expected a boolean");
    *out = it->get<bool>();
  }
  return c;
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load_files_or_throw(const std::string& tokenizer_json_path, const std::string& config_path) {
  Tokenizer t;
  t.parts_ = parse_tokenizer_json(parse_json_or_throw(read_file_or_throw(tokenizer_json_path), tokenizer_json_path),
                                  tokenizer_json_path);
  if (!config_path.empty())
    t.config_ = parse_config(parse_json_or_throw(read_file_or_throw(config_path), config_path), config_path);
  auto id_of = [&](const std::string& token) -> int32_t {
    if (token.empty()) return -1;
    return t.find_token(token).value_or(-1);
  };
  t.bos_id_ = id_of(t.config_.bos_token);
  t.eos_id_ = id_of(t.config_.eos_token);
  if (t.config_.add_bos_token) {
    t.add_bos_token_ = *t.config_.add_bos_token;
  } else {
    std::vector<int32_t> probe;
    t.parts_->post_processor.apply(probe, true);
    t.add_bos_token_ = !probe.empty() && probe.front() == t.bos_id_ && t.bos_id_ >= 0;
  }
  return t;
}

Tokenizer Tokenizer::load_or_throw(const std::string& model_dir) {
  namespace fs = std::filesystem;
  fs::path dir(model_dir);
  if (dir.extension() == ".gguf" && fs::is_regular_file(dir)) return load_gguf_or_throw(model_dir);
  std::string config_path;
  if (fs::exists(dir / "tokenizer_config.json")) config_path = (dir / "tokenizer_config.json").string();
  Tokenizer t = load_files_or_throw((dir / "tokenizer.json").string(), config_path);
  fs::path jinja = dir / "chat_template.jinja";
  if (!t.config_.chat_template && fs::exists(jinja)) t.config_.chat_template = read_file_or_throw(jinja.string());
  return t;
}

}  // namespace akv
