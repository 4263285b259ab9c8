#include "chat/qwen_xml_call_parser.h"

#include <set>

#include "chat/json_depth.h"

namespace akv {

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParamOpen = "<parameter=";
constexpr std::string_view kParamClose = "</parameter>";
constexpr std::string_view kParamCloseNl = "\n</parameter>";
constexpr std::string_view kThinkOpen = "<think>";

bool is_ws(char c) { return is_reply_ws(c); }

std::size_t skip_ws(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

// `s` (blanks skipped) starts with `m`: 1; may still (a proper prefix of it): 0; cannot: -1.
int starts_with_marker(std::string_view s, std::string_view m) {
  if (s.starts_with(m)) return 1;
  return m.starts_with(s) ? 0 : -1;
}

// JSON string content for raw bytes (quotes not included); bytes >= 0x80 pass unchanged, so a
// UTF-8 character split between fragments joins back whole.
std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  return out;
}

// A local "$ref" (#/$defs/N, #/definitions/N) of `root`; nullptr otherwise.
const ojson* resolve_ref(const ojson& schema, const ojson* root) {
  const auto ref = schema.find("$ref");
  if (root == nullptr || ref == schema.end() || !ref->is_string()) return nullptr;
  const std::string r = ref->get<std::string>();
  for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
    const std::string_view p = prefix;
    if (!r.starts_with(p)) continue;
    const auto defs = root->find(std::string(p.substr(2, p.size() - 3)));
    if (defs == root->end() || !defs->is_object()) return nullptr;
    const auto def = defs->find(r.substr(p.size()));
    return def == defs->end() ? nullptr : &*def;
  }
  return nullptr;
}

// The JSON types a schema allows ("string" when it says nothing usable).
void schema_types(const ojson& schema, const ojson* root, std::set<std::string>& types, int depth) {
  if (!schema.is_object() || depth > 8) return;
  if (const ojson* target = resolve_ref(schema, root)) return schema_types(*target, root, types, depth + 1);
  if (const auto t = schema.find("type"); t != schema.end()) {
    if (t->is_string()) types.insert(t->get<std::string>());
    if (t->is_array())
      for (const auto& v : *t)
        if (v.is_string()) types.insert(v.get<std::string>());
  }
  for (const char* key : {"anyOf", "oneOf"})
    if (const auto alts = schema.find(key); alts != schema.end() && alts->is_array())
      for (const auto& alt : *alts) schema_types(alt, root, types, depth + 1);
  if (const auto e = schema.find("enum"); types.empty() && e != schema.end() && e->is_array())
    for (const auto& v : *e) types.insert(v.is_string() ? "string" : "any");
}

bool fits(const ojson& v, const std::set<std::string>& types) {
  if (types.count("any")) return true;
  if (v.is_boolean()) return types.count("boolean") > 0;
  if (v.is_null()) return types.count("null") > 0;
  if (v.is_number_integer()) return types.count("integer") > 0 || types.count("number") > 0;
  if (v.is_number()) return types.count("number") > 0;
  if (v.is_object()) return types.count("object") > 0;
  if (v.is_array()) return types.count("array") > 0;
  return false;
}

}  // namespace

bool qwen_xml_value_is_string(const ojson* schema, const ojson* root) {
  if (schema == nullptr) return true;
  std::set<std::string> types;
  schema_types(*schema, root, types, 0);
  return types.empty() || types.count("string") > 0;
}

ojson qwen_xml_value(std::string_view raw, const ojson* schema, const ojson* root) {
  if (qwen_xml_value_is_string(schema, root)) return ojson(std::string(raw));
  std::set<std::string> types;
  schema_types(*schema, root, types, 0);
  std::string_view t = raw;
  t.remove_prefix(skip_ws(t));
  while (!t.empty() && is_ws(t.back())) t.remove_suffix(1);
  ojson v = parse_json_or_discarded(t, kMaxJsonDepth);
  if (v.is_discarded()) {
    if (t == "True") v = true;
    else if (t == "False") v = false;
    else if (t == "None") v = nullptr;
  }
  if (!v.is_discarded() && fits(v, types)) return v;
  return ojson(std::string(raw));
}

QwenXmlCallParser::QwenXmlCallParser(QwenXmlCallParserOptions options) : options_(std::move(options)) {
  if (!options_.make_call_id) options_.make_call_id = random_call_id;
  if (options_.parse_thinking && options_.starts_in_thinking) mode_ = Mode::Thinking;
}

std::vector<OutputEvent> QwenXmlCallParser::feed(std::string_view delta) {
  std::vector<OutputEvent> out;
  if (finished_) return out;
  buf_ += delta;
  while (step(out, /*final=*/false)) {
  }
  return out;
}

std::vector<OutputEvent> QwenXmlCallParser::finish() {
  std::vector<OutputEvent> out;
  if (finished_) return out;
  while (step(out, /*final=*/true)) {
  }
  finished_ = true;
  return out;
}

bool QwenXmlCallParser::step(std::vector<OutputEvent>& out, bool final) {
  switch (mode_) {
    case Mode::Text: return step_text(out, final);
    case Mode::Thinking: return step_thinking(out, final);
    case Mode::CallOpen: return step_call_open(out, final);
    case Mode::Params: return step_params(out, final);
    case Mode::Value: return step_value(out, final);
    case Mode::AfterFunction: return step_after_function(out, final);
  }
  return false;
}

void QwenXmlCallParser::args(std::vector<OutputEvent>& out, std::string_view fragment) {
  if (fragment.empty()) return;
  if (!out.empty() && out.back().kind == OutputEvent::Kind::ToolCallArgsDelta)
    out.back().text += fragment;
  else
    out.push_back({.kind = OutputEvent::Kind::ToolCallArgsDelta, .text = std::string(fragment)});
}

bool QwenXmlCallParser::step_text(std::vector<OutputEvent>& out, bool final) {
  std::size_t best = std::string::npos;
  std::string_view found;
  for (auto m : {kCallOpen, kThinkOpen}) {
    if (m == kThinkOpen && !options_.parse_thinking) continue;
    const std::size_t pos = buf_.find(m);
    if (pos < best) best = pos, found = m;
  }
  if (best != std::string::npos && !(found == kCallOpen && n_calls_ >= kMaxQwenXmlCalls)) {
    emit_text(out, OutputEvent::Kind::TextDelta, std::string_view(buf_).substr(0, best), false);
    buf_.erase(0, best + found.size());
    if (found == kThinkOpen) {
      pending_ws_.clear();
      skip_ws_ = true;
      mode_ = Mode::Thinking;
    } else {
      mode_ = Mode::CallOpen;  // pending_ws_ stays until the call is known
    }
    return true;
  }
  std::size_t hold = final ? 0 : held_prefix_length(buf_, {kCallOpen, kThinkOpen});
  if (best != std::string::npos) hold = 0;  // past the call bound: markers are text
  emit_text(out, OutputEvent::Kind::TextDelta, std::string_view(buf_).substr(0, buf_.size() - hold), final);
  buf_.erase(0, buf_.size() - hold);
  return false;
}

bool QwenXmlCallParser::step_thinking(std::vector<OutputEvent>& out, bool final) {
  if (!step_think_body(out, final)) return false;
  mode_ = Mode::Text;
  return true;
}

bool QwenXmlCallParser::step_call_open(std::vector<OutputEvent>& out, bool final) {
  const std::size_t ws = skip_ws(buf_);
  const std::string_view s = std::string_view(buf_).substr(ws);
  const int opens = starts_with_marker(s, kFunctionOpen);
  bool malformed = opens < 0 || (opens == 0 && final);
  if (opens == 0 && !final) return false;
  std::size_t close = std::string_view::npos;
  if (!malformed) {
    close = s.find('>', kFunctionOpen.size());
    const std::string_view name =
        s.substr(kFunctionOpen.size(), close == std::string_view::npos ? std::string_view::npos : close - kFunctionOpen.size());
    malformed = name.size() > kMaxQwenXmlNameBytes || name.find_first_of("<\n") != std::string_view::npos ||
                (close != std::string_view::npos && name.empty()) || (close == std::string_view::npos && final);
    if (!malformed && close == std::string_view::npos) return false;
    if (!malformed) {
      pending_ws_.clear();  // whitespace before a call is dropped
      call_name_ = name;
      out.push_back({.kind = OutputEvent::Kind::ToolCallStart, .name = call_name_, .id = options_.make_call_id()});
      ++n_calls_;
      args(out, "{");
      n_params_ = 0;
      buf_.erase(0, ws + close + 1);
      mode_ = Mode::Params;
      return true;
    }
  }
  // Not a call: the marker is text, and what follows is read as text again.
  mode_ = Mode::Text;
  skip_ws_ = false;
  emit_text(out, OutputEvent::Kind::TextDelta, kCallOpen, false);
  return true;
}

const ojson* QwenXmlCallParser::parameter_schema(const std::string& key) const {
  for (const ToolSpec& t : options_.tools) {
    if (t.name != call_name_ || !t.input_schema.is_object()) continue;
    const auto props = t.input_schema.find("properties");
    if (props == t.input_schema.end() || !props->is_object()) return nullptr;
    const auto p = props->find(key);
    return p == props->end() ? nullptr : &*p;
  }
  return nullptr;
}

bool QwenXmlCallParser::step_params(std::vector<OutputEvent>& out, bool final) {
  const std::size_t ws = skip_ws(buf_);
  const std::string_view s = std::string_view(buf_).substr(ws);
  const int param = starts_with_marker(s, kParamOpen);
  const int end = starts_with_marker(s, kFunctionClose);
  if (end == 1) {
    args(out, "}");
    out.push_back({.kind = OutputEvent::Kind::ToolCallEnd});
    buf_.erase(0, ws + kFunctionClose.size());
    mode_ = Mode::AfterFunction;
    return true;
  }
  if (param == 1) {
    const std::size_t close = s.find('>', kParamOpen.size());
    const std::string_view key =
        s.substr(kParamOpen.size(), close == std::string_view::npos ? std::string_view::npos : close - kParamOpen.size());
    const bool bad = key.size() > kMaxQwenXmlNameBytes || key.find_first_of("<\n") != std::string_view::npos ||
                     (close != std::string_view::npos && key.empty()) || n_params_ >= kMaxQwenXmlParameters;
    if (!bad && close == std::string_view::npos && !final) return false;
    if (!bad && close != std::string_view::npos) {
      const std::string k(key);
      args(out, std::string(n_params_ > 0 ? ", " : "") + ojson(k).dump() + ": ");
      ++n_params_;
      value_schema_ = parameter_schema(k);
      value_root_ = nullptr;
      for (const ToolSpec& t : options_.tools)
        if (t.name == call_name_) value_root_ = &t.input_schema;
      value_is_string_ = qwen_xml_value_is_string(value_schema_, value_root_);
      if (value_is_string_) args(out, "\"");
      value_started_ = false;
      value_.clear();
      buf_.erase(0, ws + close + 1);
      mode_ = Mode::Value;
      return true;
    }
  } else if ((param == 0 || end == 0) && !final) {
    return false;
  } else if (s.empty() && !final) {
    return false;
  }
  buf_.erase(0, ws);
  cut_call(out, /*in_value=*/false);
  return true;
}

bool QwenXmlCallParser::step_value(std::vector<OutputEvent>& out, bool final) {
  if (!value_started_) {
    if (buf_.empty() && !final) return false;
    if (!buf_.empty() && buf_.front() == '\n') buf_.erase(0, 1);
    value_started_ = true;
  }
  const std::size_t pos = buf_.find(kParamClose);
  if (pos != std::string::npos) {
    std::string_view raw = std::string_view(buf_).substr(0, pos);
    if (raw.ends_with('\n')) raw.remove_suffix(1);
    end_value(out, raw);
    buf_.erase(0, pos + kParamClose.size());
    mode_ = Mode::Params;
    return true;
  }
  const std::size_t hold = final ? 0 : held_prefix_length(buf_, {kParamCloseNl, kParamClose});
  const std::string_view ready = std::string_view(buf_).substr(0, buf_.size() - hold);
  if (value_is_string_) {
    args(out, json_escape(ready));
  } else {
    value_ += ready;
  }
  buf_.erase(0, ready.size());
  if (final || value_.size() > kMaxQwenXmlValueBytes) {
    cut_call(out, /*in_value=*/true);
    return true;
  }
  return false;
}

void QwenXmlCallParser::end_value(std::vector<OutputEvent>& out, std::string_view raw) {
  if (value_is_string_) {
    args(out, json_escape(raw));
    args(out, "\"");
    return;
  }
  value_ += raw;
  args(out, qwen_xml_value(value_, value_schema_, value_root_).dump());
  value_.clear();
}

void QwenXmlCallParser::cut_call(std::vector<OutputEvent>& out, bool in_value) {
  if (in_value) args(out, value_is_string_ ? "\"" : "null");
  args(out, "}");
  out.push_back({.kind = OutputEvent::Kind::ToolCallEnd});
  ++n_cut_calls_;
  mode_ = Mode::Text;
  skip_ws_ = false;
  const std::string pending = std::move(value_);  // a typed value never sent: kept as text
  value_.clear();
  emit_text(out, OutputEvent::Kind::TextDelta, pending, false);
}

bool QwenXmlCallParser::step_after_function(std::vector<OutputEvent>&, bool final) {
  const std::size_t ws = skip_ws(buf_);
  const std::string_view s = std::string_view(buf_).substr(ws);
  const int close = starts_with_marker(s, kCallClose);
  const int again = starts_with_marker(s, kFunctionOpen);
  if (close == 1) {
    buf_.erase(0, ws + kCallClose.size());
    mode_ = Mode::Text;
    skip_ws_ = true;
    return true;
  }
  if (again == 1) {  // another function in the same block
    mode_ = Mode::CallOpen;
    return true;
  }
  if ((close == 0 || again == 0 || s.empty()) && !final) return false;
  buf_.erase(0, ws);  // no closing tag: what follows is text
  mode_ = Mode::Text;
  skip_ws_ = true;
  return !buf_.empty();
}

}  // namespace akv
