#include "hub/model_ref.h"

#include <cctype>
#include <filesystem>

#include "base/error.h"

namespace akv {

namespace {

// The hub's rule for names: letters, digits, '-', '_' and '.', at most 96 characters, no "--"
// or "..", not starting with '-' or '.', not ending with '.'.
bool valid_name_part(std::string_view s) {
  if (s.empty() || s.size() > 96 || s.front() == '.' || s.front() == '-' || s.back() == '.') return false;
  if (s.find("..") != std::string_view::npos || s.find("--") != std::string_view::npos) return false;
  for (const char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

bool valid_revision(std::string_view s) {
  if (s.empty() || s.size() > 255 || s.find("..") != std::string_view::npos || s.front() == '/') return false;
  for (const char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '/')) return false;
  return true;
}

bool valid_quant(std::string_view s) {
  if (s.empty() || s.size() > 32) return false;
  for (const char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

std::optional<HubRef> find_hub_ref(std::string_view text) {
  HubRef r;
  if (const std::size_t at = text.find('@'); at != std::string_view::npos) {
    r.revision = std::string(text.substr(at + 1));
    text = text.substr(0, at);
    if (!valid_revision(r.revision)) return std::nullopt;
  } else {
    r.revision = "main";
  }
  if (const std::size_t colon = text.find(':'); colon != std::string_view::npos) {
    r.quant = std::string(text.substr(colon + 1));
    text = text.substr(0, colon);
    if (!valid_quant(r.quant)) return std::nullopt;
  }
  const std::size_t slash = text.find('/');
  if (slash == std::string_view::npos || text.find('/', slash + 1) != std::string_view::npos) return std::nullopt;
  if (!valid_name_part(text.substr(0, slash)) || !valid_name_part(text.substr(slash + 1))) return std::nullopt;
  r.repo_id = std::string(text);
  return r;
}

}  // namespace

HubRef parse_hub_ref(std::string_view text) {
  std::optional<HubRef> r = find_hub_ref(text);
  if (!r)
    throw Error(ErrorKind::InvalidArgument, "'" + std::string(text) +
                                                "' is not a Hugging Face model id: expected ORG/REPO[:QUANT][@REVISION] "
                                                "(e.g. Qwen/Qwen3-0.6B, unsloth/Qwen3-8B-GGUF:Q4_K_M)");
  return *r;
}

bool looks_like_hub_ref(std::string_view text) {
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(text), ec)) return false;
  if (text.starts_with(".") || text.starts_with("/") || text.starts_with("~")) return false;
  return find_hub_ref(text).has_value();
}

}  // namespace akv
