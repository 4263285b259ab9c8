// JSON Schema -> GrammarNode graph for ToolCallGrammar: the keywords listed in
// json_schema_grammar.h; everything else is ignored (the value falls back to Any).
#include <algorithm>

#include "chat/json_schema_internal.h"

namespace akv::grammar {

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::size_t kMaxLiterals = 64;  // enum values / properties per object (a 64-bit mask)
constexpr std::uint32_t kMaxMinimum = 1u << 16;  // minLength/minItems beyond this are clamped

// A non-negative integer keyword (3 and 3.0 alike), or `fallback` when absent or malformed.
std::uint32_t count_keyword(const ojson& s, const char* key, std::uint32_t fallback) {
  const auto it = s.find(key);
  if (it == s.end() || !it->is_number()) return fallback;
  const double v = it->get<double>();
  if (!(v >= 0) || v != static_cast<double>(static_cast<std::uint64_t>(v))) return fallback;
  return v >= static_cast<double>(kGrammarUnbounded) ? kGrammarUnbounded
                                                     : static_cast<std::uint32_t>(v);
}

// {min, max} with min <= max (a contradictory schema gets its maximum) and min clamped.
std::pair<std::uint32_t, std::uint32_t> count_range(const ojson& s, const char* min_key,
                                                    const char* max_key) {
  const std::uint32_t max = count_keyword(s, max_key, kGrammarUnbounded);
  const std::uint32_t min = std::min({count_keyword(s, min_key, 0), max, kMaxMinimum});
  return {min, max};
}

class SchemaCompiler {
 public:
  SchemaCompiler(const ojson& root, std::vector<GrammarNode>& nodes) : root_(root), nodes_(nodes) {}

  std::int32_t compile(const ojson& s, int depth) {
    if (depth > kMaxSchemaDepth || !s.is_object()) return add({});
    if (auto it = s.find("$ref"); it != s.end() && it->is_string()) {
      if (const ojson* target = resolve(it->get<std::string>())) return compile(*target, depth + 1);
      return add({});
    }
    if (auto it = s.find("const"); it != s.end()) return literal({it->dump()});
    if (auto it = s.find("enum"); it != s.end() && it->is_array() && !it->empty()) {
      std::vector<std::string> lits;
      for (const auto& v : *it)
        if (lits.size() < kMaxLiterals) lits.push_back(v.dump());
      return literal(std::move(lits));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      auto it = s.find(key);
      if (it == s.end() || !it->is_array() || it->empty()) continue;
      GrammarNode n{.kind = GrammarNodeKind::AnyOf};
      for (const auto& alt : *it) n.alternatives.push_back(compile(merged(s, alt, key), depth + 1));
      return add(std::move(n));
    }
    if (auto it = s.find("type"); it != s.end() && it->is_array()) {
      GrammarNode n{.kind = GrammarNodeKind::AnyOf};
      for (const auto& t : *it) {
        ojson one = s;
        one["type"] = t;
        n.alternatives.push_back(compile(one, depth + 1));
      }
      return n.alternatives.empty() ? add({}) : add(std::move(n));
    }
    const std::string type =
        s.contains("type") && s["type"].is_string() ? s["type"].get<std::string>() : "";
    if (type == "object" || (type.empty() && s.contains("properties"))) return object(s, depth);
    if (type == "array") {
      GrammarNode n{.kind = GrammarNodeKind::Array};
      std::tie(n.min_items, n.max_items) = count_range(s, "minItems", "maxItems");
      if (auto it = s.find("items"); it != s.end() && it->is_object())
        n.items = compile(*it, depth + 1);
      return add(std::move(n));
    }
    if (type == "string") {
      GrammarNode n{.kind = GrammarNodeKind::String};
      std::tie(n.min_length, n.max_length) = count_range(s, "minLength", "maxLength");
      return add(std::move(n));
    }
    if (type == "number") return add({.kind = GrammarNodeKind::Number});
    if (type == "integer") return add({.kind = GrammarNodeKind::Integer});
    if (type == "boolean") return literal({"true", "false"});
    if (type == "null") return literal({"null"});
    return add({});  // no type, or one we do not know: any JSON value
  }

 private:
  std::int32_t add(GrammarNode n) {
    nodes_.push_back(std::move(n));
    return static_cast<std::int32_t>(nodes_.size() - 1);
  }
  std::int32_t literal(std::vector<std::string> lits) {
    return add({.kind = GrammarNodeKind::Literal, .literals = std::move(lits)});
  }

  std::int32_t object(const ojson& s, int depth) {
    GrammarNode n{.kind = GrammarNodeKind::Object};
    std::vector<std::string> required;
    if (auto it = s.find("required"); it != s.end() && it->is_array())
      for (const auto& r : *it)
        if (r.is_string()) required.push_back(r.get<std::string>());
    std::vector<std::pair<std::string, const ojson*>> props;
    if (auto it = s.find("properties"); it != s.end() && it->is_object())
      for (const auto& [name, sub] : it->items())
        if (props.size() < kMaxLiterals) props.emplace_back(name, &sub);
    for (const auto& [name, sub] : props) {
      n.key_literals.push_back(ojson(name).dump());
      n.required.push_back(std::find(required.begin(), required.end(), name) != required.end());
      n.property_nodes.push_back(compile(*sub, depth + 1));
    }
    const auto additional = s.find("additionalProperties");
    const bool closed =
        additional != s.end() && additional->is_boolean() && !additional->get<bool>();
    n.free_keys = props.empty() && !closed;
    return add(std::move(n));
  }

  // anyOf alternatives inherit the sibling keywords (type, properties...) of the parent schema.
  static ojson merged(const ojson& parent, const ojson& alt, const char* drop) {
    if (!alt.is_object()) return alt;
    ojson out = parent;
    out.erase(drop);
    for (const auto& [k, v] : alt.items()) out[k] = v;
    return out;
  }

  const ojson* resolve(const std::string& ref) const {
    if (ref == "#") return &root_;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (!ref.starts_with(p)) continue;
      const std::string section = p.substr(2, p.size() - 3);
      const std::string name = ref.substr(p.size());
      if (root_.contains(section) && root_[section].is_object() && root_[section].contains(name))
        return &root_[section][name];
    }
    return nullptr;
  }

  const ojson& root_;
  std::vector<GrammarNode>& nodes_;
};

}  // namespace

std::int32_t compile_json_schema(const ojson& schema, std::vector<GrammarNode>& nodes) {
  SchemaCompiler compiler(schema, nodes);
  return compiler.compile(schema, 0);
}

}  // namespace akv::grammar
