// The neutral chat request both API dialects (Anthropic Messages, OpenAI Chat) translate into,
// and that prompt building (normalisation, template, tokenizer) consumes. The server fills it;
// nothing here knows HTTP. Tool schemas and tool inputs stay JSON values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace akv {

enum class ChatRole { System, User, Assistant, Tool };

enum class BlockType {
  Text,
  ToolUse,     // assistant: a call the model made (id, name, input)
  ToolResult,  // user (Anthropic) or tool role (OpenAI): the result of a call (tool_use_id, text)
  Thinking,    // assistant reasoning from an earlier turn (signatures are never checked)
  Image,       // accepted, rendered as a placeholder text; models here are text-only
};

struct ContentBlock {
  BlockType type = BlockType::Text;
  std::string text{};             // Text, Thinking, ToolResult (flattened), Image placeholder
  std::string tool_use_id{};      // ToolUse id, or the id a ToolResult answers
  std::string tool_name{};        // ToolUse
  nlohmann::ordered_json input{}; // ToolUse arguments (an object)
  bool is_error = false;        // ToolResult
  bool cache_breakpoint = false;  // the block carried cache_control
};

struct ChatMessage {
  ChatRole role = ChatRole::User;
  std::vector<ContentBlock> blocks{};
  // True when the client sent content as a plain string (rendered the same as one text block).
  bool content_was_string = false;
};

struct ToolSpec {
  std::string name{};
  std::string description{};
  nlohmann::ordered_json input_schema{};  // JSON Schema object (unknown keywords are ignored)
};

enum class ToolChoiceType { Auto, Any, Tool, None };

struct ToolChoice {
  ToolChoiceType type = ToolChoiceType::Auto;
  std::string name{};  // ToolChoiceType::Tool
  bool disable_parallel = false;
};

struct SamplingOptions {
  double temperature = 1.0;
  double top_p = 1.0;
  std::int32_t top_k = 0;  // 0: off
  double min_p = 0.0;
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  double repetition_penalty = 1.0;
  std::optional<std::uint64_t> seed;
};

struct ChatRequest {
  std::string model{};                  // as the client sent it (echoed back)
  std::vector<ContentBlock> system{};   // system text blocks, in order
  std::vector<ChatMessage> messages{};  // user / assistant / system / tool, as sent
  std::vector<ToolSpec> tools{};        // tools the model may call (defer_loading ones removed)
  ToolChoice tool_choice;
  std::int64_t max_tokens = 0;
  std::vector<std::string> stop_sequences{};
  SamplingOptions sampling;
  bool stream = false;
  bool thinking_enabled = false;      // the client asked for reasoning
  std::string reasoning_effort{};     // "low" | "medium" | "high" (reasoning_effort.h); "": not given
  std::int32_t top_logprobs = 0;      // OpenAI logprobs
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // extra template variables
};

}  // namespace akv
