#include "server/anthropic_request.h"

#include "chat/reasoning_effort.h"

#include "server/api_error.h"
#include "server/json_fields.h"

namespace akv {

namespace {

using json = nlohmann::ordered_json;
using namespace fields;

bool has_cache_control(const json& block) { return block.is_object() && has(block, "cache_control"); }

// tool_result content: a string or a list of text/image blocks, flattened to text.
std::string tool_result_text(const json& content, const std::string& path) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) fail(path, "Input should be a string or a list of content blocks");
  std::string text;
  for (std::size_t i = 0; i < content.size(); ++i) {
    const json& b = content[i];
    if (!b.is_object()) fail(join(path, i), "Input should be an object");
    const std::string type = b.value("type", "");
    if (type == "text") {
      if (!text.empty()) text += "\n";
      text += require_string(b, "text", join(path, i));
    } else if (type == "image") {
      if (!text.empty()) text += "\n";
      text += "[image]";
    }
  }
  return text;
}

std::optional<ContentBlock> parse_block(const json& b, const std::string& path) {
  if (!b.is_object()) fail(path, "Input should be a valid content block object");
  const std::string type = require_string(b, "type", path);
  ContentBlock block;
  block.cache_breakpoint = has_cache_control(b);
  if (type == "text") {
    block.type = BlockType::Text;
    block.text = require_string(b, "text", path);
  } else if (type == "tool_use") {
    block.type = BlockType::ToolUse;
    block.tool_use_id = require_string(b, "id", path);
    block.tool_name = require_string(b, "name", path);
    block.input = has(b, "input") ? b["input"] : json::object();
    if (!block.input.is_object()) fail(join(path, "input"), "Input should be a valid dictionary");
  } else if (type == "tool_result") {
    block.type = BlockType::ToolResult;
    block.tool_use_id = require_string(b, "tool_use_id", path);
    block.text = tool_result_text(b.contains("content") ? b["content"] : json(), join(path, "content"));
    block.is_error = opt_bool(b, "is_error", path).value_or(false);
  } else if (type == "thinking") {
    block.type = BlockType::Thinking;
    block.text = opt_string(b, "thinking", path).value_or("");  // signature is never checked
  } else if (type == "redacted_thinking") {
    return std::nullopt;
  } else if (type == "image" || type == "document") {
    block.type = BlockType::Image;
    block.text = type == "image" ? "[image]" : "[document]";
  } else {
    return std::nullopt;  // search_result, server_tool_use, *_tool_result, container_upload, future types
  }
  return block;
}

// `last`: the final message, which may be an empty assistant turn (a prefill of nothing).
ChatMessage parse_message(const json& m, const std::string& path, bool last) {
  if (!m.is_object()) fail(path, "Input should be a valid message object");
  ChatMessage msg;
  const std::string role = require_string(m, "role", path);
  if (role == "user") msg.role = ChatRole::User;
  else if (role == "assistant") msg.role = ChatRole::Assistant;
  else if (role == "system") msg.role = ChatRole::System;
  else fail(join(path, "role"), "Input should be 'user', 'assistant' or 'system'");
  const json& content = require(m, "content", path);
  const bool empty = content.is_string() ? content.get_ref<const std::string&>().empty()
                                         : content.is_array() && content.empty();
  if (empty && !(last && msg.role == ChatRole::Assistant))
    fail(join(path, "content"), "must not be empty (only a final assistant message may be)");
  if (content.is_string()) {
    msg.content_was_string = true;
    msg.blocks.push_back({.type = BlockType::Text, .text = content.get<std::string>()});
  } else if (content.is_array()) {
    for (std::size_t i = 0; i < content.size(); ++i)
      if (auto block = parse_block(content[i], join(join(path, "content"), i))) msg.blocks.push_back(std::move(*block));
  } else {
    fail(join(path, "content"), "Input should be a string or a list of content blocks");
  }
  return msg;
}

void parse_system(const json& body, ChatRequest& r) {
  if (!has(body, "system")) return;
  const json& s = body["system"];
  if (s.is_string()) {
    r.system.push_back({.type = BlockType::Text, .text = s.get<std::string>()});
    return;
  }
  if (!s.is_array()) fail("system", "Input should be a string or a list of text blocks");
  for (std::size_t i = 0; i < s.size(); ++i) {
    const std::string path = join("system", i);
    if (!s[i].is_object()) fail(path, "Input should be a valid text block");
    if (s[i].value("type", "text") != "text") continue;
    r.system.push_back({.type = BlockType::Text,
                        .text = require_string(s[i], "text", path),
                        .cache_breakpoint = has_cache_control(s[i])});
  }
}

void parse_tools(const json& body, ChatRequest& r) {
  if (!has(body, "tools")) return;
  const json& tools = body["tools"];
  if (!tools.is_array()) fail("tools", "Input should be a valid list");
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const std::string path = join("tools", i);
    const json& t = tools[i];
    if (!t.is_object()) fail(path, "Input should be a valid tool object");
    if (opt_bool(t, "defer_loading", path).value_or(false)) continue;  // never shown to the model
    const std::string type = opt_string(t, "type", path).value_or("custom");
    if (type != "custom" && !has(t, "input_schema")) continue;  // server tools (web_search_..., bash_...)
    ToolSpec spec;
    spec.name = require_string(t, "name", path);
    if (spec.name.empty()) fail(join(path, "name"), "must not be empty");
    spec.description = opt_string(t, "description", path).value_or("");
    spec.input_schema = require(t, "input_schema", path);
    if (!spec.input_schema.is_object()) fail(join(path, "input_schema"), "Input should be a valid dictionary");
    r.tools.push_back(std::move(spec));
  }
}

void parse_tool_choice(const json& body, ChatRequest& r) {
  if (!has(body, "tool_choice")) return;
  const json& c = body["tool_choice"];
  if (!c.is_object()) fail("tool_choice", "Input should be a valid dictionary");
  const std::string type = require_string(c, "type", "tool_choice");
  if (type == "auto") r.tool_choice.type = ToolChoiceType::Auto;
  else if (type == "any") r.tool_choice.type = ToolChoiceType::Any;
  else if (type == "none") r.tool_choice.type = ToolChoiceType::None;
  else if (type == "tool") {
    r.tool_choice.type = ToolChoiceType::Tool;
    r.tool_choice.name = require_string(c, "name", "tool_choice");
    bool found = false;
    for (const ToolSpec& t : r.tools) found |= t.name == r.tool_choice.name;
    if (!found) fail("tool_choice.name", "no tool named '" + r.tool_choice.name + "' in tools");
  } else {
    fail("tool_choice.type", "Input should be 'auto', 'any', 'tool' or 'none'");
  }
  r.tool_choice.disable_parallel = opt_bool(c, "disable_parallel_tool_use", "tool_choice").value_or(false);
  if ((r.tool_choice.type == ToolChoiceType::Any || r.tool_choice.type == ToolChoiceType::Tool) && r.tools.empty())
    fail("tool_choice", "a tool must be called but tools is empty");
}

ChatRequest parse_common(const json& body) {
  ChatRequest r;
  r.model = require_string(body, "model", "");
  const json& messages = require_array(body, "messages", "");
  if (messages.empty()) fail("messages", "at least one message is required");
  if (messages.size() > 100000) fail("messages", "at most 100000 messages");
  for (std::size_t i = 0; i < messages.size(); ++i)
    r.messages.push_back(parse_message(messages[i], join("messages", i), i + 1 == messages.size()));
  parse_system(body, r);
  parse_tools(body, r);
  parse_tool_choice(body, r);
  std::string thinking_type;
  if (has(body, "thinking")) {
    const json& t = body["thinking"];
    if (!t.is_object()) fail("thinking", "Input should be a valid dictionary");
    thinking_type = require_string(t, "type", "thinking");
    r.thinking_enabled = thinking_type == "enabled";  // any other type: off
    const auto budget = t.find("budget_tokens");  // never a 400 over it (api-notes §1.2)
    if (r.thinking_enabled && budget != t.end() && budget->is_number_integer())
      r.reasoning_effort = effort_for_budget(budget->get<std::int64_t>());
  }
  // Reasoning effort: the thinking budget, else output_config.effort, else low when thinking is
  // disabled (a harmony model always reasons), else the template's default.
  if (r.reasoning_effort.empty() && has(body, "output_config") && body["output_config"].is_object())
    if (auto effort = opt_string(body["output_config"], "effort", "output_config"))
      r.reasoning_effort = effort_for_name(*effort);
  if (r.reasoning_effort.empty() && thinking_type == "disabled") r.reasoning_effort = "low";
  if (has(body, "metadata")) {
    if (!body["metadata"].is_object()) fail("metadata", "Input should be a valid dictionary");
    opt_string(body["metadata"], "user_id", "metadata");
  }
  return r;
}

}  // namespace

ChatRequest parse_anthropic_messages(const json& body, const SamplingOptions& defaults) {
  // A server-side thread (the SDK's tool runner sends only the new turn and the previous
  // message's id) needs the conversation stored under that id: refused in the form the SDK
  // answers by resending the whole conversation, never answered from the new turn alone.
  if (has(body, "thread") && !body["thread"].is_null() && body["thread"] != false)
    throw DetailedRequestError("thread: this server keeps no threads; send the whole conversation",
                               {{"error_code", "thread_unsupported_request"}, {"unsupported", {"thread"}}});
  ChatRequest r = parse_common(body);
  r.max_tokens = require_int(body, "max_tokens", "", 0, 1'000'000'000);
  r.stream = opt_bool(body, "stream", "").value_or(false);
  r.stop_sequences =
      opt_string_list(body, "stop_sequences", "", /*bare_string_ok=*/false, kMaxStopSequences, kMaxStopSequenceBytes);
  r.sampling = defaults;  // min_p and the penalties: no Messages API field
  r.sampling.temperature = opt_number(body, "temperature", "", 0.0, 2.0).value_or(defaults.temperature);
  r.sampling.top_p = opt_number(body, "top_p", "", 0.0, 1.0).value_or(defaults.top_p);
  r.sampling.top_k =
      static_cast<std::int32_t>(opt_int(body, "top_k", "", 0, 1'000'000).value_or(defaults.top_k));
  return r;
}

ChatRequest parse_anthropic_count_tokens(const json& body) { return parse_common(body); }

bool thinking_display_omitted(const json& body) {
  const auto t = body.find("thinking");
  if (t == body.end() || !t->is_object()) return false;
  const auto d = t->find("display");
  return d != t->end() && d->is_string() && d->get<std::string>() == "omitted";
}

}  // namespace akv
