#include "chat/tool_call_parser.h"

#include <optional>
#include <random>
#include <utility>

#include <nlohmann/json.hpp>

namespace akv {

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";

bool is_ws(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

std::string random_call_id() {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof(kAlnum) - 1)];
  return id;
}

// Length of the longest suffix of `s` that is a proper prefix of some marker.
std::size_t held_prefix_length(std::string_view s, const std::vector<std::string_view>& markers) {
  std::size_t best = 0;
  for (auto m : markers)
    for (std::size_t k = std::min(s.size(), m.size() - 1); k > best; --k)
      if (m.starts_with(s.substr(s.size() - k))) {
        best = k;
        break;
      }
  return best;
}

// End (one past) of the first complete JSON object/array in s, starting at its first
// non-whitespace character; npos while incomplete. `invalid` when it does not start with { or [.
std::size_t json_value_end(std::string_view s, bool& invalid) {
  invalid = false;
  std::size_t i = 0;
  while (i < s.size() && is_ws(s[i])) ++i;
  if (i == s.size()) return std::string_view::npos;
  if (s[i] != '{' && s[i] != '[') {
    invalid = true;
    return std::string_view::npos;
  }
  int depth = 0;
  bool in_str = false, esc = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (in_str) {
      if (esc)
        esc = false;
      else if (c == '\\')
        esc = true;
      else if (c == '"')
        in_str = false;
      continue;
    }
    if (c == '"')
      in_str = true;
    else if (c == '{' || c == '[')
      ++depth;
    else if ((c == '}' || c == ']') && --depth == 0)
      return i + 1;
  }
  return std::string_view::npos;
}

// First `closer` in s that is not inside a JSON string (a path may contain "</tool_call>").
std::size_t find_closer_outside_strings(std::string_view s, std::string_view closer) {
  bool in_str = false, esc = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (!in_str && s.compare(i, closer.size(), closer) == 0) return i;
    const char c = s[i];
    if (in_str) {
      if (esc)
        esc = false;
      else if (c == '\\')
        esc = true;
      else if (c == '"')
        in_str = false;
    } else if (c == '"') {
      in_str = true;
    }
  }
  return std::string_view::npos;
}

struct ParsedCall {
  std::string name;
  ojson arguments;
};

// {"name": N, "arguments"|"parameters": {...} or a string holding that object}.
std::optional<ParsedCall> parse_call_object(const ojson& v, bool require_arguments) {
  if (!v.is_object() || !v.contains("name") || !v["name"].is_string()) return std::nullopt;
  ParsedCall call{v["name"].get<std::string>(), ojson::object()};
  const ojson* args = nullptr;
  if (v.contains("arguments"))
    args = &v["arguments"];
  else if (v.contains("parameters"))
    args = &v["parameters"];
  if (args == nullptr) {
    if (require_arguments) return std::nullopt;
    return call;
  }
  if (args->is_string()) {
    ojson parsed = ojson::parse(args->get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_object()) return std::nullopt;
    call.arguments = std::move(parsed);
  } else if (args->is_object()) {
    call.arguments = *args;
  } else if (!args->is_null()) {
    return std::nullopt;
  }
  return call;
}

}  // namespace

ToolCallParser::ToolCallParser(ToolCallParserOptions options) : options_(std::move(options)) {
  if (!options_.make_call_id) options_.make_call_id = random_call_id;
  switch (options_.format) {
    case ToolCallFormat::Hermes:
      openers_ = {std::string(kHermesOpen)};
      break;
    case ToolCallFormat::Llama3Json:
      openers_ = {std::string(kPythonTag)};
      break;
    case ToolCallFormat::Mistral:
      openers_ = {std::string(kMistralOpen)};
      break;
    case ToolCallFormat::None:
      break;
  }
  if (options_.starts_in_thinking && options_.parse_thinking) mode_ = Mode::Thinking;
}

std::vector<OutputEvent> ToolCallParser::feed(std::string_view delta) {
  std::vector<OutputEvent> out;
  if (finished_) return out;
  buf_ += delta;
  step(out, /*final=*/false);
  return out;
}

std::vector<OutputEvent> ToolCallParser::finish() {
  std::vector<OutputEvent> out;
  if (finished_) return out;
  step(out, /*final=*/true);
  finished_ = true;
  return out;
}

void ToolCallParser::step(std::vector<OutputEvent>& out, bool final) {
  for (;;) {
    bool progressed = false;
    switch (mode_) {
      case Mode::Text:
        progressed = step_text(out, final);
        break;
      case Mode::Thinking:
        progressed = step_thinking(out, final);
        break;
      case Mode::CallBody:
        progressed = step_call(out, final);
        break;
    }
    if (!progressed) break;
  }
}

void ToolCallParser::emit_text(std::vector<OutputEvent>& out, OutputEvent::Kind kind,
                               std::string_view text, bool final) {
  if (skip_ws_) {
    while (!text.empty() && is_ws(text.front())) text.remove_prefix(1);
    if (text.empty()) return;
    skip_ws_ = false;
  }
  std::size_t end = text.size();
  while (end > 0 && is_ws(text[end - 1])) --end;
  if (end == 0) {
    if (!final) pending_ws_ += text;
    return;
  }
  std::string piece = std::move(pending_ws_);
  piece += text.substr(0, end);
  pending_ws_ = final ? std::string() : std::string(text.substr(end));
  if (!out.empty() && out.back().kind == kind) {
    out.back().text += piece;
  } else {
    out.push_back({.kind = kind, .text = std::move(piece)});
  }
}

bool ToolCallParser::step_text(std::vector<OutputEvent>& out, bool final) {
  if (skip_ws_) {
    std::size_t i = 0;
    const bool llama = options_.format == ToolCallFormat::Llama3Json;
    while (i < buf_.size() && (is_ws(buf_[i]) || (llama && n_calls_ > 0 && buf_[i] == ';'))) ++i;
    buf_.erase(0, i);
    if (buf_.empty()) return false;
    // Llama 3 writes a call as the bare JSON object that starts its reply.
    if (llama && buf_[0] == '{') {
      mode_ = Mode::CallBody;
      call_opener_.clear();
      return true;
    }
  }
  std::vector<std::string_view> markers(openers_.begin(), openers_.end());
  if (options_.parse_thinking) markers.push_back(kThinkOpen);

  std::size_t best = std::string::npos;
  std::string_view found;
  for (auto m : markers) {
    const std::size_t pos = buf_.find(m);
    if (pos < best) best = pos, found = m;
  }
  if (best != std::string::npos) {
    emit_text(out, OutputEvent::Kind::TextDelta, std::string_view(buf_).substr(0, best), false);
    buf_.erase(0, best + found.size());
    if (found == kThinkOpen) {
      mode_ = Mode::Thinking;
    } else {
      mode_ = Mode::CallBody;
      call_opener_ = found;
      ws_before_call_ = std::move(pending_ws_);
    }
    pending_ws_.clear();
    skip_ws_ = true;
    return true;
  }
  const std::size_t hold = final ? 0 : held_prefix_length(buf_, markers);
  emit_text(out, OutputEvent::Kind::TextDelta, std::string_view(buf_).substr(0, buf_.size() - hold),
            final);
  buf_.erase(0, buf_.size() - hold);
  return false;
}

bool ToolCallParser::step_thinking(std::vector<OutputEvent>& out, bool final) {
  const std::size_t pos = buf_.find(kThinkClose);
  if (pos != std::string::npos) {
    emit_text(out, OutputEvent::Kind::ThinkingDelta, std::string_view(buf_).substr(0, pos), false);
    pending_ws_.clear();
    buf_.erase(0, pos + kThinkClose.size());
    mode_ = Mode::Text;
    skip_ws_ = true;
    return true;
  }
  const std::size_t hold = final ? 0 : held_prefix_length(buf_, {kThinkClose});
  emit_text(out, OutputEvent::Kind::ThinkingDelta,
            std::string_view(buf_).substr(0, buf_.size() - hold), final);
  buf_.erase(0, buf_.size() - hold);
  return false;
}

bool ToolCallParser::step_call(std::vector<OutputEvent>& out, bool final) {
  if (call_opener_ == kHermesOpen) {
    const std::size_t pos = find_closer_outside_strings(buf_, kHermesClose);
    if (pos == std::string::npos && !final) return false;
    const std::size_t body_end = pos == std::string::npos ? buf_.size() : pos;
    const std::size_t consumed = pos == std::string::npos ? buf_.size() : pos + kHermesClose.size();
    const std::string raw = call_opener_ + buf_.substr(0, consumed);
    const std::string body = buf_.substr(0, body_end);
    buf_.erase(0, consumed);
    end_call(out, body, raw);
    return true;
  }
  // Mistral's newer form: [TOOL_CALLS]name[CALL_ID]id[ARGS]{...}
  std::size_t json_from = 0;
  std::string name_prefix;
  if (call_opener_ == kMistralOpen) {
    std::size_t i = 0;
    while (i < buf_.size() && is_ws(buf_[i])) ++i;
    if (i < buf_.size() && buf_[i] != '[' && buf_[i] != '{') {
      const std::size_t args = buf_.find(kMistralArgs);
      if (args == std::string::npos) {
        if (!final) return false;
      } else {
        name_prefix = buf_.substr(i, args - i);
        if (auto id = name_prefix.find(kMistralCallId); id != std::string::npos)
          name_prefix.resize(id);
        json_from = args + kMistralArgs.size();
      }
    }
  }
  bool invalid = false;
  std::size_t end = json_value_end(std::string_view(buf_).substr(json_from), invalid);
  if (end == std::string::npos && !invalid && !final) return false;
  if (invalid && !final) return false;  // not JSON: keep it all, it becomes text at the end
  const std::size_t consumed = end == std::string::npos ? buf_.size() : json_from + end;
  const std::string raw = call_opener_ + buf_.substr(0, consumed);
  std::string body = buf_.substr(json_from, consumed - json_from);
  if (!name_prefix.empty())
    body = R"({"name": )" + ojson(name_prefix).dump() + R"(, "arguments": )" + body + "}";
  buf_.erase(0, consumed);
  end_call(out, body, raw);
  return true;
}

void ToolCallParser::end_call(std::vector<OutputEvent>& out, std::string_view body,
                              std::string_view raw) {
  mode_ = Mode::Text;
  if (emit_calls(out, body)) {
    skip_ws_ = true;
  } else {  // not a call after all: the marker and body are text, with the whitespace before
    skip_ws_ = false;
    pending_ws_ = std::move(ws_before_call_);
    emit_text(out, OutputEvent::Kind::TextDelta, raw, false);
  }
  ws_before_call_.clear();
}

bool ToolCallParser::emit_calls(std::vector<OutputEvent>& out, std::string_view body) {
  const ojson v = ojson::parse(body, nullptr, /*allow_exceptions=*/false);
  // A bare Llama JSON reply must look like a call (name + parameters) to be taken as one.
  const bool strict = call_opener_.empty();
  std::vector<ParsedCall> calls;
  if (v.is_array() && !v.empty()) {
    for (const auto& item : v) {
      auto call = parse_call_object(item, strict);
      if (!call) return false;
      calls.push_back(std::move(*call));
    }
  } else if (auto call = parse_call_object(v, strict)) {
    calls.push_back(std::move(*call));
  } else {
    return false;
  }
  pending_ws_.clear();
  for (auto& call : calls) {
    out.push_back({.kind = OutputEvent::Kind::ToolCallStart,
                   .name = call.name,
                   .id = options_.make_call_id()});
    out.push_back({.kind = OutputEvent::Kind::ToolCallArgsDelta, .text = call.arguments.dump()});
    out.push_back({.kind = OutputEvent::Kind::ToolCallEnd});
    ++n_calls_;
  }
  return true;
}

}  // namespace akv
