// Test helper: a small JSON Schema validator for the keywords the grammar tests use (type, enum,
// const, anyOf, properties/required/additionalProperties, items, local $ref, minLength/maxLength
// in code points, minItems/maxItems).
#pragma once

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

namespace akv::test {

inline std::size_t count_code_points(const std::string& s) {
  return static_cast<std::size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

inline const nlohmann::ordered_json* resolve_ref(const nlohmann::ordered_json& root,
                                                 const nlohmann::ordered_json& s) {
  if (!s.contains("$ref")) return &s;
  const std::string ref = s["$ref"];
  return &root["$defs"][ref.substr(ref.rfind('/') + 1)];
}

inline bool schema_type_matches(const nlohmann::ordered_json& v, const std::string& t) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number();
  if (t == "integer") return v.is_number_integer();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  return true;
}

inline bool valid_against(const nlohmann::ordered_json& v, const nlohmann::ordered_json& schema,
                          const nlohmann::ordered_json& root) {
  const nlohmann::ordered_json& s = *resolve_ref(root, schema);
  if (s.contains("const") && v != s["const"]) return false;
  if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end())
    return false;
  if (s.contains("anyOf")) {
    bool any = false;
    for (const auto& alt : s["anyOf"]) any |= valid_against(v, alt, root);
    if (!any) return false;
  }
  if (s.contains("type")) {
    bool ok = false;
    if (s["type"].is_array()) {
      for (const auto& t : s["type"]) ok |= schema_type_matches(v, t.get<std::string>());
    } else {
      ok = schema_type_matches(v, s["type"].get<std::string>());
    }
    if (!ok) return false;
  }
  if (v.is_string()) {
    const std::size_t n = count_code_points(v.get<std::string>());
    if (s.contains("minLength") && n < s["minLength"].get<std::size_t>()) return false;
    if (s.contains("maxLength") && n > s["maxLength"].get<std::size_t>()) return false;
  }
  if (v.is_object() && s.contains("properties")) {
    for (const auto& r : s.value("required", nlohmann::ordered_json::array()))
      if (!v.contains(r.get<std::string>())) return false;
    for (const auto& [k, x] : v.items()) {
      if (!s["properties"].contains(k)) {
        if (s.value("additionalProperties", true) == false) return false;
        continue;
      }
      if (!valid_against(x, s["properties"][k], root)) return false;
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<std::size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<std::size_t>()) return false;
    if (s.contains("items"))
      for (const auto& x : v)
        if (!valid_against(x, s["items"], root)) return false;
  }
  return true;
}

}  // namespace akv::test
