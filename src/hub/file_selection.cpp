#include "hub/file_selection.h"

#include <algorithm>
#include <cctype>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace akv {

namespace {

// Small files a model directory may hold next to its weights (config.json is required by the
// loader; the rest are read when present).
constexpr const char* kSideFiles[] = {"config.json",           "generation_config.json", "tokenizer.json",
                                      "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                                      "chat_template.json"};

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

bool ends_with_ci(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && upper(s.substr(s.size() - suffix.size())) == upper(std::string(suffix));
}

bool is_root(const std::string& name) { return name.find('/') == std::string::npos; }

// A GGUF file of the model itself (projectors for vision towers are not).
bool is_model_gguf(const std::string& name) {
  if (!ends_with_ci(name, ".gguf")) return false;
  return upper(name).find("MMPROJ") == std::string::npos;
}

// The quantization named in a GGUF file's path: a token such as Q4_K_M, IQ3_XXS, Q8_0, F16,
// BF16, bounded by '-', '.', '_' (before) or '/' (folder per quantization).
const std::regex& quant_pattern() {
  static const std::regex re(R"((?:^|[-./_])((?:I?Q[1-8](?:_[0-9A-Z]+)*)|BF16|F16|F32)(?=[-./]|$))",
                             std::regex::icase);
  return re;
}

std::string quant_of(const std::string& name) {
  std::smatch m;
  std::string found;
  // The last match: "Llama-3.2-1B-Q4_K_M.gguf" -> Q4_K_M, not a version number.
  for (auto it = std::sregex_iterator(name.begin(), name.end(), quant_pattern()); it != std::sregex_iterator(); ++it)
    found = (*it)[1].str();
  return upper(found);
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

std::vector<std::string> gguf_quants(const std::vector<std::string>& names) {
  std::set<std::string> q;
  for (const std::string& n : names)
    if (is_model_gguf(n))
      if (std::string s = quant_of(n); !s.empty()) q.insert(s);
  return {q.begin(), q.end()};
}

std::vector<std::string> shards_of_index(const std::string& index_json, const std::string& index_path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(index_json);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::BadFormat, index_path + ": not JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw Error(ErrorKind::BadFormat, index_path + ": no weight_map object");
  std::set<std::string> shards;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string()) throw Error(ErrorKind::BadFormat, index_path + ": weight_map." + tensor + " is not a string");
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find("..") != std::string::npos || f.front() == '/')
      throw Error(ErrorKind::BadFormat, index_path + ": weight_map." + tensor + ": bad file name '" + f + "'");
    shards.insert(f);
  }
  return {shards.begin(), shards.end()};
}

FileSelection select_model_files(const std::vector<std::string>& names, const std::string& quant) {
  FileSelection sel;
  const std::set<std::string> present(names.begin(), names.end());
  for (const char* f : kSideFiles)
    if (present.count(f)) sel.files.push_back(f);

  std::vector<std::string> safetensors;
  for (const std::string& n : names)
    if (is_root(n) && ends_with_ci(n, ".safetensors") && !n.starts_with("consolidated")) safetensors.push_back(n);
  const std::vector<std::string> quants = gguf_quants(names);

  if (quant.empty() && !safetensors.empty()) {
    if (present.count("model.safetensors.index.json")) {
      sel.index_file = "model.safetensors.index.json";  // the shards are read from it
      sel.files.push_back(sel.index_file);
    } else if (present.count("model.safetensors")) {
      sel.files.push_back("model.safetensors");
    } else {
      for (const std::string& s : safetensors) sel.files.push_back(s);
    }
    return sel;
  }
  if (quants.empty()) {
    if (!quant.empty())
      throw Error(ErrorKind::NotFound, "no GGUF files in the repository, so no quantization '" + quant +
                                           "'; drop ':" + quant + "' to use its safetensors");
    throw Error(ErrorKind::NotFound,
                "the repository holds neither safetensors weights nor GGUF files (files: " + join(names) + ")");
  }
  std::string want = upper(quant);
  if (want.empty()) {
    if (std::find(quants.begin(), quants.end(), "Q4_K_M") != quants.end()) want = "Q4_K_M";
    else if (quants.size() == 1) want = quants[0];
    else
      throw Error(ErrorKind::InvalidArgument, "the repository has several GGUF quantizations (" + join(quants) +
                                                  "): name one, e.g. ORG/REPO:" + quants[0]);
  }
  if (std::find(quants.begin(), quants.end(), want) == quants.end())
    throw Error(ErrorKind::NotFound, "no quantization '" + quant + "' in the repository; it has: " + join(quants));
  sel.quant = want;
  for (const std::string& n : names)  // every split part (-00001-of-00003) of that quantization
    if (is_model_gguf(n) && quant_of(n) == want) sel.files.push_back(n);
  return sel;
}

}  // namespace akv
