#include "server/anthropic_response.h"

#include "chat/json_depth.h"
#include "server/json_fields.h"

namespace akv {

namespace {
using json = nlohmann::ordered_json;

// The model's arguments; {} when they are not an object (or nest past kMaxJsonDepth).
json parse_args(const std::string& args) {
  json input = parse_json_or_discarded(args.empty() ? "{}" : args, fields::kMaxJsonDepth);
  return input.is_object() ? input : json::object();
}
}  // namespace

std::string anthropic_stop_reason(StopReason r) {
  switch (r) {
    case StopReason::EndTurn: return "end_turn";
    case StopReason::MaxTokens: return "max_tokens";
    case StopReason::StopSequence: return "stop_sequence";
    case StopReason::ToolUse: return "tool_use";
    case StopReason::Cancelled: return "end_turn";
    case StopReason::Error: return "end_turn";
  }
  return "end_turn";
}

json anthropic_usage(const ReplyUsage& u) {
  return {{"input_tokens", u.uncached_tokens()},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", u.cached_tokens},
          {"output_tokens", u.output_tokens},
          {"cache_creation", {{"ephemeral_5m_input_tokens", 0}, {"ephemeral_1h_input_tokens", 0}}},
          {"service_tier", "standard"}};
}

json anthropic_message(const std::string& id, const std::string& model, const CollectingSink& out) {
  json content = json::array();
  for (const OutputBlock& b : out.blocks()) {
    switch (b.type) {
      case OutputBlock::Type::Text:
        if (!b.text.empty()) content.push_back({{"type", "text"}, {"text", b.text}});
        break;
      case OutputBlock::Type::Thinking:
        content.push_back({{"type", "thinking"}, {"thinking", b.text}, {"signature", ""}});
        break;
      case OutputBlock::Type::ToolUse:
        content.push_back({{"type", "tool_use"}, {"id", b.id}, {"name", b.name}, {"input", parse_args(b.args_json)}});
        break;
    }
  }
  const ReplyFinish& f = out.result();
  return {{"id", id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model},
          {"content", content},
          {"stop_reason", anthropic_stop_reason(f.reason)},
          {"stop_sequence", f.reason == StopReason::StopSequence ? json(f.stop_sequence) : json(nullptr)},
          {"usage", anthropic_usage(f.usage)}};
}

bool AnthropicSseWriter::event(const char* name, const json& data) {
  std::string s = "event: ";
  s += name;
  s += "\ndata: ";
  s += data.dump(-1, ' ', false, json::error_handler_t::replace);
  s += "\n\n";
  return write_(s);
}

bool AnthropicSseWriter::start(const ReplyUsage& usage) {
  if (started_) return true;
  started_ = true;
  ReplyUsage u = usage;
  u.output_tokens = 1;  // as Anthropic sends it
  return event("message_start", {{"type", "message_start"},
                                 {"message",
                                  {{"id", id_},
                                   {"type", "message"},
                                   {"role", "assistant"},
                                   {"model", model_},
                                   {"content", json::array()},
                                   {"stop_reason", nullptr},
                                   {"stop_sequence", nullptr},
                                   {"usage", anthropic_usage(u)}}}});
}

bool AnthropicSseWriter::open_block(Open kind, json content_block) {
  if (!close_block()) return false;
  open_ = kind;
  ++index_;
  return event("content_block_start",
               {{"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(content_block)}});
}

bool AnthropicSseWriter::close_block() {
  if (open_ == Open::None) return true;
  if (open_ == Open::Thinking &&
      !event("content_block_delta", {{"type", "content_block_delta"},
                                     {"index", index_},
                                     {"delta", {{"type", "signature_delta"}, {"signature", ""}}}}))
    return false;
  open_ = Open::None;
  return event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
}

bool AnthropicSseWriter::text(std::string_view delta) {
  if (delta.empty()) return true;
  if (open_ != Open::Text && !open_block(Open::Text, {{"type", "text"}, {"text", ""}})) return false;
  return event("content_block_delta", {{"type", "content_block_delta"},
                                       {"index", index_},
                                       {"delta", {{"type", "text_delta"}, {"text", delta}}}});
}

bool AnthropicSseWriter::thinking(std::string_view delta) {
  if (delta.empty()) return true;
  if (open_ != Open::Thinking &&
      !open_block(Open::Thinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}))
    return false;
  return event("content_block_delta", {{"type", "content_block_delta"},
                                       {"index", index_},
                                       {"delta", {{"type", "thinking_delta"}, {"thinking", delta}}}});
}

bool AnthropicSseWriter::tool_start(const std::string& id, const std::string& name) {
  return open_block(Open::ToolUse, {{"type", "tool_use"}, {"id", id}, {"name", name}, {"input", json::object()}});
}

bool AnthropicSseWriter::tool_args(std::string_view fragment) {
  if (open_ != Open::ToolUse || fragment.empty()) return true;
  return event("content_block_delta", {{"type", "content_block_delta"},
                                       {"index", index_},
                                       {"delta", {{"type", "input_json_delta"}, {"partial_json", fragment}}}});
}

bool AnthropicSseWriter::tool_end() { return open_ == Open::ToolUse ? close_block() : true; }

bool AnthropicSseWriter::finish(const ReplyFinish& f) {
  if (!start(f.usage) || !close_block()) return false;
  json usage = anthropic_usage(f.usage);
  if (!event("message_delta",
             {{"type", "message_delta"},
              {"delta",
               {{"stop_reason", anthropic_stop_reason(f.reason)},
                {"stop_sequence", f.reason == StopReason::StopSequence ? json(f.stop_sequence) : json(nullptr)}}},
              {"usage", usage}}))
    return false;
  return event("message_stop", {{"type", "message_stop"}});
}

bool AnthropicSseWriter::ping() { return event("ping", {{"type", "ping"}}); }

bool AnthropicSseWriter::error(const std::string& type, const std::string& message) {
  return event("error", {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}});
}

}  // namespace akv
