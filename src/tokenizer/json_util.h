// Small helpers for reading tokenizer.json fields with errors that name the file and field.
// Internal to the tokenizer library.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "base/error.h"

namespace akv::tok {

using Json = nlohmann::json;

[[noreturn]] inline void throw_bad_field(const std::string& where, std::string_view message) {
  throw Error(ErrorKind::BadFormat, where + ": " + std::string(message));
}

// j[key] as a string; throws naming where.key if it is missing or not a string.
inline std::string json_string(const Json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) throw_bad_field(where + "." + key, "missing or not a string");
  return it->get<std::string>();
}

inline std::string json_string_or(const Json& j, const char* key, std::string fallback) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return fallback;
  return it->get<std::string>();
}

inline bool json_bool_or(const Json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_boolean()) return fallback;
  return it->get<bool>();
}

// The "type" field of a component object.
inline std::string json_type(const Json& j, const std::string& where) {
  if (!j.is_object()) throw_bad_field(where, "expected an object");
  return json_string(j, "type", where);
}

// A {"String": s} or {"Regex": r} pattern object.
struct PatternSpec {
  bool is_regex = false;
  std::string text;
};

inline PatternSpec json_pattern(const Json& j, const std::string& where) {
  auto it = j.find("pattern");
  if (it == j.end() || !it->is_object()) throw_bad_field(where + ".pattern", "missing or not an object");
  if (it->contains("String") && (*it)["String"].is_string()) return {false, (*it)["String"].get<std::string>()};
  if (it->contains("Regex") && (*it)["Regex"].is_string()) return {true, (*it)["Regex"].get<std::string>()};
  throw_bad_field(where + ".pattern", "expected {\"String\": ...} or {\"Regex\": ...}");
}

}  // namespace akv::tok
