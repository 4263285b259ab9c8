#include "server/openai_request.h"

#include "chat/reasoning_effort.h"

#include "server/json_fields.h"

namespace akv {

namespace {

using json = nlohmann::ordered_json;
using namespace fields;

// content: a string, null, or a list of parts [{type:"text", text}, {type:"image_url", ...}].
std::vector<ContentBlock> parse_content(const json& m, const std::string& path, bool& was_string) {
  std::vector<ContentBlock> blocks;
  was_string = false;
  if (!has(m, "content")) return blocks;
  const json& c = m["content"];
  if (c.is_string()) {
    was_string = true;
    blocks.push_back({.type = BlockType::Text, .text = c.get<std::string>()});
    return blocks;
  }
  if (!c.is_array()) fail(join(path, "content"), "Input should be a string or a list of content parts");
  for (std::size_t i = 0; i < c.size(); ++i) {
    const std::string p = join(join(path, "content"), i);
    if (!c[i].is_object()) fail(p, "Input should be a valid content part");
    const std::string type = require_string(c[i], "type", p);
    if (type == "text") blocks.push_back({.type = BlockType::Text, .text = require_string(c[i], "text", p)});
    else if (type == "image_url" || type == "input_audio" || type == "file")
      blocks.push_back({.type = BlockType::Image, .text = "[image]"});
  }
  return blocks;
}

void parse_tool_calls(const json& m, const std::string& path, ChatMessage& msg) {
  if (!has(m, "tool_calls")) return;
  const json& calls = m["tool_calls"];
  if (!calls.is_array()) fail(join(path, "tool_calls"), "Input should be a valid list");
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const std::string p = join(join(path, "tool_calls"), i);
    const json& fn = require(calls[i], "function", p);
    ContentBlock call{.type = BlockType::ToolUse};
    call.tool_use_id = opt_string(calls[i], "id", p).value_or("call_" + std::to_string(i));
    call.tool_name = require_string(fn, "name", join(p, "function"));
    const std::string args = opt_string(fn, "arguments", join(p, "function")).value_or("{}");
    const std::string args_path = join(join(p, "function"), "arguments");
    call.input = parse_json_field(args, args_path);
    if (call.input.is_discarded() || !call.input.is_object())
      fail(args_path, "must be a JSON object encoded as a string");
    msg.blocks.push_back(std::move(call));
  }
}

ChatMessage parse_message(const json& m, const std::string& path) {
  if (!m.is_object()) fail(path, "Input should be a valid message object");
  const std::string role = require_string(m, "role", path);
  ChatMessage msg;
  bool was_string = false;
  if (role == "system" || role == "developer") msg.role = ChatRole::System;
  else if (role == "user") msg.role = ChatRole::User;
  else if (role == "assistant") msg.role = ChatRole::Assistant;
  else if (role == "tool") msg.role = ChatRole::Tool;
  else fail(join(path, "role"), "Input should be 'system', 'developer', 'user', 'assistant' or 'tool'");
  std::vector<ContentBlock> content = parse_content(m, path, was_string);
  if (msg.role == ChatRole::Tool) {
    ContentBlock result{.type = BlockType::ToolResult};
    result.tool_use_id = require_string(m, "tool_call_id", path);
    for (const ContentBlock& b : content) result.text += b.text;
    msg.blocks.push_back(std::move(result));
    return msg;
  }
  if (msg.role != ChatRole::Assistant && !has(m, "content")) fail(join(path, "content"), "Field required");
  msg.content_was_string = was_string;
  msg.blocks = std::move(content);
  if (msg.role == ChatRole::Assistant) {
    // The de-facto reasoning field comes back as the turn's reasoning (harmony's analysis).
    if (auto reasoning = opt_string(m, "reasoning_content", path); reasoning && !reasoning->empty())
      msg.blocks.insert(msg.blocks.begin(), ContentBlock{.type = BlockType::Thinking, .text = *reasoning});
    parse_tool_calls(m, path, msg);
  }
  return msg;
}

void parse_tools(const json& body, ChatRequest& r) {
  if (!has(body, "tools")) return;
  const json& tools = body["tools"];
  if (!tools.is_array()) fail("tools", "Input should be a valid list");
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const std::string p = join("tools", i);
    if (opt_string(tools[i], "type", p).value_or("function") != "function") continue;
    const json& fn = require(tools[i], "function", p);
    ToolSpec spec;
    spec.name = require_string(fn, "name", join(p, "function"));
    spec.description = opt_string(fn, "description", join(p, "function")).value_or("");
    spec.input_schema = has(fn, "parameters") ? fn["parameters"] : json{{"type", "object"}, {"properties", json::object()}};
    r.tools.push_back(std::move(spec));
  }
}

void parse_tool_choice(const json& body, ChatRequest& r) {
  if (!has(body, "tool_choice")) return;
  const json& c = body["tool_choice"];
  if (c.is_string()) {
    const std::string s = c.get<std::string>();
    if (s == "auto") r.tool_choice.type = ToolChoiceType::Auto;
    else if (s == "none") r.tool_choice.type = ToolChoiceType::None;
    else if (s == "required") r.tool_choice.type = ToolChoiceType::Any;
    else fail("tool_choice", "Input should be 'none', 'auto', 'required' or a named function");
  } else if (c.is_object()) {
    r.tool_choice.type = ToolChoiceType::Tool;
    r.tool_choice.name = require_string(require(c, "function", "tool_choice"), "name", "tool_choice.function");
    bool found = false;
    for (const ToolSpec& t : r.tools) found |= t.name == r.tool_choice.name;
    if (!found) fail("tool_choice.function.name", "no tool named '" + r.tool_choice.name + "' in tools");
  } else {
    fail("tool_choice", "Input should be a string or an object");
  }
  if (r.tool_choice.type != ToolChoiceType::Auto && r.tool_choice.type != ToolChoiceType::None && r.tools.empty())
    fail("tool_choice", "a tool must be called but tools is empty");
  if (has(body, "parallel_tool_calls") && body["parallel_tool_calls"].is_boolean())
    r.tool_choice.disable_parallel = !body["parallel_tool_calls"].get<bool>();
}

void parse_sampling(const json& body, const SamplingOptions& d, ChatRequest& r) {
  r.sampling.temperature = opt_number(body, "temperature", "", 0.0, 2.0).value_or(d.temperature);
  r.sampling.top_p = opt_number(body, "top_p", "", 0.0, 1.0).value_or(d.top_p);
  r.sampling.top_k = static_cast<std::int32_t>(opt_int(body, "top_k", "", 0, 1'000'000).value_or(d.top_k));
  r.sampling.min_p = opt_number(body, "min_p", "", 0.0, 1.0).value_or(d.min_p);
  r.sampling.presence_penalty = opt_number(body, "presence_penalty", "", -2.0, 2.0).value_or(d.presence_penalty);
  r.sampling.frequency_penalty = opt_number(body, "frequency_penalty", "", -2.0, 2.0).value_or(d.frequency_penalty);
  r.sampling.repetition_penalty =
      opt_number(body, "repetition_penalty", "", 0.01, 10.0).value_or(d.repetition_penalty);
  if (auto seed = opt_int(body, "seed", "", INT64_MIN, INT64_MAX)) r.sampling.seed = static_cast<std::uint64_t>(*seed);
  r.stop_sequences = opt_string_list(body, "stop", "", /*bare_string_ok=*/true, 16, kMaxStopSequenceBytes);
  r.stream = opt_bool(body, "stream", "").value_or(false);
  if (auto n = opt_int(body, "n", "", 1, 128); n && *n != 1) fail("n", "only n=1 is supported");
}

bool include_usage(const json& body) {
  if (!has(body, "stream_options")) return false;
  const json& o = body["stream_options"];
  if (!o.is_object()) fail("stream_options", "Input should be a valid dictionary");
  return opt_bool(o, "include_usage", "stream_options").value_or(false);
}

// Fields both OpenAI endpoints validate but do not use.
void check_unused_fields(const json& body) {
  opt_string(body, "user", "");  // used as the agent id (request_identity.h) when valid
}

// Log probabilities are not returned: asking for them is a 400, not a silent null.
void reject_logprobs(const json& body) {
  const auto top = opt_int(body, "top_logprobs", "", 0, 20);
  if (has(body, "logprobs")) {
    const json& v = body["logprobs"];
    const bool asked = v.is_boolean() ? v.get<bool>() : !(v.is_number_integer() && v.get<std::int64_t>() == 0);
    if (asked) fail("logprobs", "log probabilities are not supported by this server");
  }
  if (top.value_or(0) > 0) fail("top_logprobs", "log probabilities are not supported by this server");
}

}  // namespace

void check_prompt_ids(const std::vector<std::int32_t>& ids, std::int32_t vocab_size) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab_size)
      fail(join("prompt", i), "token id " + std::to_string(ids[i]) + " is outside the vocabulary [0, " +
                                  std::to_string(vocab_size) + ")");
}

OpenAiChatRequest parse_openai_chat(const json& body, const SamplingOptions& defaults) {
  OpenAiChatRequest out;
  ChatRequest& r = out.chat;
  r.model = require_string(body, "model", "");
  const json& messages = require_array(body, "messages", "");
  if (messages.empty()) fail("messages", "at least one message is required");
  for (std::size_t i = 0; i < messages.size(); ++i) {
    ChatMessage msg = parse_message(messages[i], join("messages", i));
    // The leading system/developer messages are the system prompt (as Anthropic's `system`), so
    // the template renders them as its system turn and both dialects share that prefix; a later
    // one is a mid-conversation reminder (prompt_normalizer.h, rule 3).
    if (msg.role == ChatRole::System && r.messages.empty()) {
      for (ContentBlock& b : msg.blocks) r.system.push_back(std::move(b));
      continue;
    }
    r.messages.push_back(std::move(msg));
  }
  if (r.messages.empty()) {  // system messages alone: they are the turn to answer (rule 3)
    r.messages.push_back(ChatMessage{.role = ChatRole::System, .blocks = std::move(r.system)});
    r.system.clear();
  }
  parse_tools(body, r);
  parse_tool_choice(body, r);
  parse_sampling(body, defaults, r);
  const auto max_completion = opt_int(body, "max_completion_tokens", "", 1, 1'000'000'000);
  const auto max_tokens = opt_int(body, "max_tokens", "", 1, 1'000'000'000);
  r.max_tokens = max_completion.value_or(max_tokens.value_or(0));  // 0: up to the context
  if (has(body, "logprobs") && !body["logprobs"].is_boolean()) fail("logprobs", "Input should be a valid boolean");
  reject_logprobs(body);
  check_unused_fields(body);
  out.include_usage = include_usage(body);
  if (has(body, "reasoning_effort")) {
    r.thinking_enabled = body["reasoning_effort"] != "none";
    if (body["reasoning_effort"].is_string()) r.reasoning_effort = effort_for_name(body["reasoning_effort"].get<std::string>());
  }
  return out;
}

OpenAiCompletionRequest parse_openai_completion(const json& body, const SamplingOptions& defaults) {
  OpenAiCompletionRequest out;
  out.model = require_string(body, "model", "");
  const json& prompt = require(body, "prompt", "");
  if (prompt.is_string()) {
    out.prompt_text = prompt.get<std::string>();
  } else if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_string()) {
    out.prompt_text = prompt[0].get<std::string>();
  } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number_integer()) {
    out.prompt_is_ids = true;
    for (std::size_t i = 0; i < prompt.size(); ++i) {
      const json& id = prompt[i];
      if (!id.is_number_integer()) fail(join("prompt", i), "Input should be a valid integer");
      // number_unsigned holds values past INT64_MAX; get<int64_t> would wrap them.
      const bool in_range = id.is_number_unsigned() ? id.get<std::uint64_t>() <= INT32_MAX
                                                    : id.get<std::int64_t>() >= 0 && id.get<std::int64_t>() <= INT32_MAX;
      if (!in_range)
        fail(join("prompt", i), "Input should be a token id between 0 and " + std::to_string(INT32_MAX));
      out.prompt_ids.push_back(static_cast<std::int32_t>(id.get<std::int64_t>()));
    }
  } else {
    fail("prompt", "Input should be a string, a one-element list of strings, or a list of token ids");
  }
  parse_sampling(body, defaults, out.options);
  out.options.model = out.model;
  out.options.max_tokens = opt_int(body, "max_tokens", "", 0, 1'000'000'000).value_or(16);
  out.echo = opt_bool(body, "echo", "").value_or(false);
  if (has(body, "logprobs") && !body["logprobs"].is_number_integer())
    fail("logprobs", "Input should be a valid integer");
  reject_logprobs(body);
  check_unused_fields(body);
  out.include_usage = include_usage(body);
  return out;
}

}  // namespace akv
