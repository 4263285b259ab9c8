#include "chat/harmony_history.h"

#include <string>
#include <vector>

#include "chat/harmony_parser.h"
#include "chat/json_depth.h"
#include "chat/prompt_normalizer.h"

namespace akv {

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kAssistantStart = "<|start|>assistant";
constexpr std::string_view kFunctions = "functions.";
constexpr std::size_t kMaxTurnMessages = 256;

std::string join_thinking(const std::vector<ContentBlock>& blocks) {
  std::string out;
  for (const auto& b : blocks)
    if (b.type == BlockType::Thinking) out += b.text;
  return out;
}

// The same message as far as the model is concerned: channel, recipient, and the text (a
// call's arguments compared as JSON).
bool same_message(const HarmonyMessage& a, const HarmonyMessage& b) {
  if (a.channel != b.channel || a.recipient != b.recipient) return false;
  if (a.recipient.empty()) return a.content == b.content;
  const ojson x = parse_json_or_discarded(a.content, kMaxJsonDepth);
  return !x.is_discarded() && x == parse_json_or_discarded(b.content, kMaxJsonDepth);
}

}  // namespace

void append_harmony_assistant(const ChatMessage& turn, ojson& messages) {
  const std::string thinking = join_thinking(turn.blocks);
  const std::string text = join_text_blocks(turn.blocks);
  bool first = true;
  for (const auto& b : turn.blocks) {
    if (b.type != BlockType::ToolUse) continue;
    ojson function = ojson::object();
    function["name"] = b.tool_name;
    function["arguments"] = b.input.is_null() ? ojson::object() : b.input;
    ojson msg = ojson::object();
    msg["role"] = "assistant";
    msg["content"] = first && thinking.empty() ? text : std::string();
    if (first && !thinking.empty()) msg["thinking"] = thinking;
    msg["tool_calls"] = ojson::array({ojson{{"id", b.tool_use_id}, {"type", "function"}, {"function", std::move(function)}}});
    messages.push_back(std::move(msg));
    first = false;
  }
  if (!first) return;
  ojson msg = ojson::object();
  msg["role"] = "assistant";
  msg["content"] = text;
  if (!thinking.empty()) msg["thinking"] = thinking;
  messages.push_back(std::move(msg));
}

std::optional<ChatMessage> harmony_turn_from_raw(std::string_view raw) {
  const auto parsed = parse_harmony_messages(std::string(kAssistantStart) + std::string(raw), kMaxTurnMessages);
  if (!parsed) return std::nullopt;
  ChatMessage turn{.role = ChatRole::Assistant};
  for (const HarmonyMessage& m : *parsed) {
    if (!m.recipient.empty()) {
      ContentBlock call{.type = BlockType::ToolUse};
      call.tool_name = std::string_view(m.recipient).starts_with(kFunctions) ? m.recipient.substr(kFunctions.size()) : m.recipient;
      call.input = parse_json_or_discarded(m.content, kMaxJsonDepth);
      if (!call.input.is_object()) return std::nullopt;
      turn.blocks.push_back(std::move(call));
    } else {
      turn.blocks.push_back({.type = m.channel == "analysis" ? BlockType::Thinking : BlockType::Text, .text = m.content});
    }
  }
  return turn;
}

std::optional<std::size_t> harmony_turn_rest(std::string_view text, std::size_t from, const RememberedTurn& turn) {
  const std::string_view prompt = turn.prompt_text;
  if (prompt.size() < from || !prompt.ends_with(kAssistantStart) || !text.starts_with(prompt)) return std::nullopt;
  const auto generated = parse_harmony_messages(std::string(kAssistantStart) + turn.raw_text, kMaxTurnMessages);
  if (!generated || generated->empty()) return std::nullopt;
  // The assistant messages the template rendered where the turn was generated.
  const std::size_t turn_start = prompt.size() - kAssistantStart.size();
  std::vector<HarmonyMessage> rendered = parse_harmony_prefix(text.substr(turn_start), generated->size() + 1);
  std::size_t n_assistant = 0;
  while (n_assistant < rendered.size() && rendered[n_assistant].role == "assistant") ++n_assistant;
  rendered.resize(n_assistant);
  if (rendered.size() != generated->size()) return std::nullopt;
  for (std::size_t i = 0; i < rendered.size(); ++i)
    if (!same_message(rendered[i], (*generated)[i])) return std::nullopt;
  const HarmonyMessage& last = rendered.back();
  if (last.end.empty()) return std::nullopt;
  return turn_start + last.end_pos - last.end.size();  // the end marker stays: it was not generated
}

}  // namespace akv
