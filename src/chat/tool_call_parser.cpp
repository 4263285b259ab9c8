#include "chat/tool_call_parser.h"

#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "chat/json_depth.h"
#include "chat/json_scanner.h"
#include "chat/reply_stream.h"

namespace akv {

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kMistralCallId = "[CALL_ID]";

bool is_ws(char c) { return is_reply_ws(c); }

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
    ojson parsed = parse_json_or_discarded(args->get<std::string>(), kMaxJsonDepth);
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

// The current call body seen incrementally: streams each call's arguments while the model writes
// them (see the header's contract). Fed the body's bytes as they arrive; adds events to `out`.
class ToolCallParser::CallStream final : public JsonListener {
 public:
  // `origin`: where the body's JSON starts in the parser's buffer. `fixed_name`: Mistral's
  // name[ARGS]{...} form, whose whole value is the arguments. `strict`: a bare Llama reply is a
  // call only with arguments.
  CallStream(std::size_t origin, std::string fixed_name, bool strict)
      : origin_(origin), fixed_name_(std::move(fixed_name)), strict_(strict) {}

  std::size_t origin() const { return origin_; }
  // Still inside a valid JSON prefix: the body has not ended.
  bool scanning() const { return scan_.status() == JsonScanner::Status::InValue; }
  bool yielded_calls() const { return n_yielded_ > 0; }

  // Scans what `buf` (the parser's buffer) holds beyond what was fed before.
  void feed(ToolCallParser& parser, std::vector<OutputEvent>& out, std::string_view buf) {
    bind(parser, out, buf);
    for (; fed_ < body_.size() && scanning(); ++fed_) {
      if (scan_.feed(body_[fed_], fed_, this) == JsonScanner::Status::Error) {
        if (streaming_) cut_call();
        break;
      }
      if (args_open_ && scan_.closable()) safe_end_ = fed_ + 1;
    }
    if (args_open_) send_args(safe_end_);
    unbind();
  }

  // The body ended (or the reply did): a call still open is cut short.
  void close(ToolCallParser& parser, std::vector<OutputEvent>& out, std::string_view buf) {
    bind(parser, out, buf);
    if (streaming_) cut_call();
    unbind();
  }

  void on_key(std::size_t begin, std::size_t end, std::size_t depth) override {
    if (in_object_ && depth == call_depth_) key_ = json_string(body_.substr(begin, end - begin)).value_or("");
  }

  void on_value_begin(std::size_t pos, std::size_t depth, char first) override {
    if (!fixed_name_.empty()) {
      if (depth == 0 && first == '{') start_call(fixed_name_, pos);
      return;
    }
    if (depth == 0) {
      call_depth_ = first == '{' ? 1 : first == '[' ? 2 : 0;
      if (first == '{') begin_object(pos);
      return;
    }
    if (call_depth_ == 2 && depth == 1) {  // an element of an array of calls
      in_object_ = first == '{';
      if (in_object_) begin_object(pos);
      return;
    }
    if (!in_object_ || depth != call_depth_) return;
    if (key_ == "name") {
      if (first == '"' && !name_) name_begin_ = pos;
    } else if ((key_ == "arguments" || key_ == "parameters") && !args_begin_) {
      if (first != '{') return;  // e.g. a string holding JSON: the call comes out whole
      args_begin_ = pos;
      if (name_) start_call(*name_, pos);
    }
  }

  void on_value_end(std::size_t end, std::size_t depth) override {
    if (!fixed_name_.empty()) {
      if (depth == 0 && streaming_) {
        end_args(end);
        end_call();
      }
      return;
    }
    if (in_object_ && depth == call_depth_) {
      if (key_ == "name" && name_begin_ && !name_) name_ = json_string(body_.substr(*name_begin_, end - *name_begin_));
      if ((key_ == "arguments" || key_ == "parameters") && args_begin_ && args_end_ == 0) end_args(end);
      name_begin_.reset();
    } else if (in_object_ && depth + 1 == call_depth_) {
      end_object(end);
    }
  }

 private:
  void bind(ToolCallParser& parser, std::vector<OutputEvent>& out, std::string_view buf) {
    parser_ = &parser;
    out_ = &out;
    body_ = buf.substr(origin_);
  }

  void unbind() {
    parser_ = nullptr;
    out_ = nullptr;
    body_ = {};
  }

  static std::optional<std::string> json_string(std::string_view raw) {
    const ojson v = ojson::parse(raw, nullptr, /*allow_exceptions=*/false);
    if (!v.is_string()) return std::nullopt;
    return v.get<std::string>();
  }

  void begin_object(std::size_t pos) {
    in_object_ = true;
    object_begin_ = pos;
    key_.clear();
    name_begin_.reset();
    name_.reset();
    args_begin_.reset();
    args_end_ = 0;
  }

  void yield_start(const std::string& name) {
    parser_->pending_ws_.clear();  // whitespace before a call is dropped
    parser_->ws_before_call_.clear();
    out_->push_back({.kind = OutputEvent::Kind::ToolCallStart, .name = name, .id = parser_->options_.make_call_id()});
    ++parser_->n_calls_;
    ++n_yielded_;
  }

  void yield_args(std::string_view text) {
    if (text.empty()) return;
    if (!out_->empty() && out_->back().kind == OutputEvent::Kind::ToolCallArgsDelta)
      out_->back().text += text;
    else
      out_->push_back({.kind = OutputEvent::Kind::ToolCallArgsDelta, .text = std::string(text)});
  }

  void start_call(const std::string& name, std::size_t args_begin) {
    yield_start(name);
    streaming_ = args_open_ = true;
    args_begin_ = args_begin;
    args_sent_ = safe_end_ = args_begin;
  }

  void send_args(std::size_t end) {
    if (end <= args_sent_) return;
    yield_args(body_.substr(args_sent_, end - args_sent_));
    args_sent_ = end;
  }

  void end_args(std::size_t end) {
    args_end_ = end;
    if (!args_open_) return;
    send_args(end);
    args_open_ = false;
  }

  void end_call() {
    out_->push_back({.kind = OutputEvent::Kind::ToolCallEnd});
    streaming_ = false;
  }

  // Closes the streamed call where it stands: what was sent of its arguments ends at a closable
  // point (send_args only goes that far), so the closing suffix makes the fragments valid JSON.
  void cut_call() {
    if (args_open_) {
      send_args(safe_end_);
      JsonScanner sent;
      for (std::size_t i = *args_begin_; i < args_sent_; ++i) sent.feed(body_[i], i, nullptr);
      AKV_CHECK(args_sent_ == *args_begin_ || sent.closable(), "streamed arguments end where they can be closed");
      yield_args(args_sent_ == *args_begin_ ? "{}" : sent.closing_suffix());
      args_open_ = false;
    }
    end_call();
    ++parser_->n_cut_calls_;
  }

  void end_object(std::size_t end) {
    in_object_ = false;
    if (streaming_) {
      end_call();
      return;
    }
    // Not streamed: the call comes out whole if the object is one.
    const ojson v = parse_json_or_discarded(body_.substr(object_begin_, end - object_begin_), kMaxJsonDepth);
    std::optional<ParsedCall> call = parse_call_object(v, strict_);
    if (!call) return;
    std::string args = call->arguments.dump();
    if (args_begin_ && args_end_ > *args_begin_) {  // the model's own text when it is the same object
      const std::string_view raw = body_.substr(*args_begin_, args_end_ - *args_begin_);
      if (parse_json_or_discarded(raw, kMaxJsonDepth) == call->arguments) args = raw;
    }
    yield_start(call->name);
    yield_args(args);
    end_call();
  }

  const std::size_t origin_;
  const std::string fixed_name_;
  const bool strict_;
  JsonScanner scan_;
  std::size_t fed_ = 0;  // body bytes scanned
  int n_yielded_ = 0;    // calls started from this body
  // Bound while feeding.
  ToolCallParser* parser_ = nullptr;
  std::vector<OutputEvent>* out_ = nullptr;
  std::string_view body_;
  // The shape: a call object's keys are at depth 1 (one object) or 2 (an array of them); 0: neither.
  std::size_t call_depth_ = 0;
  // The call object being read.
  bool in_object_ = false;
  std::size_t object_begin_ = 0;
  std::string key_;
  std::optional<std::size_t> name_begin_;
  std::optional<std::string> name_;
  std::optional<std::size_t> args_begin_;  // an object-valued "arguments"/"parameters"
  std::size_t args_end_ = 0;
  // The call being streamed: started, not yet ended.
  bool streaming_ = false;
  bool args_open_ = false;     // its arguments object has not closed yet
  std::size_t args_sent_ = 0;  // arguments sent up to here
  std::size_t safe_end_ = 0;   // the last point the arguments so far can be closed
};

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
    case ToolCallFormat::QwenXml:  // qwen_xml_call_parser.h
    case ToolCallFormat::Harmony:  // harmony_parser.h
    case ToolCallFormat::None:
      break;
  }
  if (options_.starts_in_thinking && options_.parse_thinking) mode_ = Mode::Thinking;
}

ToolCallParser::~ToolCallParser() = default;
ToolCallParser::ToolCallParser(ToolCallParser&&) noexcept = default;
ToolCallParser& ToolCallParser::operator=(ToolCallParser&&) noexcept = default;

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
  if (!step_think_body(out, final)) return false;
  mode_ = Mode::Text;
  return true;
}

bool ToolCallParser::step_call(std::vector<OutputEvent>& out, bool final) {
  // Mistral's newer form: [TOOL_CALLS]name[CALL_ID]id[ARGS]{...}
  std::size_t json_from = 0;
  std::string name_prefix;
  if (call_opener_ == kMistralOpen) {
    std::size_t i = 0;
    while (i < buf_.size() && is_ws(buf_[i])) ++i;
    if (i == buf_.size() && !final) return false;  // which form is not known yet
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
  if (!stream_)
    stream_ = std::make_unique<CallStream>(json_from, name_prefix, /*strict=*/call_opener_.empty());
  AKV_CHECK(stream_->origin() == json_from, "a call body's JSON starts where it started");
  stream_->feed(*this, out, buf_);
  // A valid JSON prefix has not ended: the closer outside strings, or the value's end, would
  // have ended (or broken) it.
  if (stream_->scanning() && !final) return false;

  std::size_t consumed = 0;
  std::string body;
  if (call_opener_ == kHermesOpen) {
    const std::size_t pos = find_closer_outside_strings(buf_, kHermesClose);
    if (pos == std::string::npos && !final) return false;
    body = buf_.substr(0, pos == std::string::npos ? buf_.size() : pos);
    consumed = pos == std::string::npos ? buf_.size() : pos + kHermesClose.size();
  } else {
    bool invalid = false;
    const std::size_t end = json_value_end(std::string_view(buf_).substr(json_from), invalid);
    if (end == std::string::npos && !final) return false;  // incomplete, or not JSON (text at the end)
    consumed = end == std::string::npos ? buf_.size() : json_from + end;
    body = buf_.substr(json_from, consumed - json_from);
    if (!name_prefix.empty())
      body = R"({"name": )" + ojson(name_prefix).dump() + R"(, "arguments": )" + body + "}";
  }
  const std::string raw = call_opener_ + buf_.substr(0, consumed);
  std::unique_ptr<CallStream> stream = std::move(stream_);
  stream->close(*this, out, buf_);
  buf_.erase(0, consumed);
  if (stream->yielded_calls()) {  // what of the body was not a call is dropped
    mode_ = Mode::Text;
    skip_ws_ = true;
    ws_before_call_.clear();
    return true;
  }
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
  const ojson v = parse_json_or_discarded(body, kMaxJsonDepth);
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
