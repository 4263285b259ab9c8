#include "chat/prompt_builder.h"

#include <cctype>
#include <map>
#include <utility>

#include "base/error.h"
#include "chat/prompt_normalizer.h"
#include "tokenizer/tokenizer.h"

namespace akv {

using ojson = nlohmann::ordered_json;

const char* const kFallbackChatTemplate =
    "{{- bos_token }}"
    "{%- if tools %}{{ 'Tools: call one with <tool_call>\\n{\"name\": <name>, \"arguments\": "
    "<object>}\\n</tool_call>\\n' }}"
    "{%- for tool in tools %}{{ tool | tojson }}{{ '\\n' }}{%- endfor %}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' %}{{ 'System: ' + message.content + '\\n' }}"
    "{%- elif message.role == 'user' %}{{ 'User: ' + message.content + '\\n' }}"
    "{%- elif message.role == 'tool' %}{{ 'Tool: ' + message.content + '\\n' }}"
    "{%- elif message.role == 'assistant' %}{{ 'Assistant:' }}"
    "{%- if message.content and message.content[0] != ' ' %}{{ ' ' }}{%- endif %}{{ "
    "message.content }}"
    "{%- if message.tool_calls %}{%- for call in message.tool_calls %}"
    "{{ '<tool_call>\\n{\"name\": ' + call.function.name | tojson + ', \"arguments\": ' + "
    "call.function.arguments | tojson + '}\\n</tool_call>' }}"
    "{%- endfor %}{%- endif %}{{ '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ 'Assistant:' }}{%- endif %}";

namespace {

struct TemplateChoice {
  std::string source;
  bool fallback = false;
};

TemplateChoice choose_template(const Tokenizer& tokenizer, const PromptBuilderOptions& options) {
  if (options.template_override) return {*options.template_override, false};
  if (tokenizer.chat_template()) return {*tokenizer.chat_template(), false};
  return {kFallbackChatTemplate, true};
}

ojson tool_json(const ToolSpec& tool) {
  ojson function = ojson::object();
  function["name"] = tool.name;
  function["description"] = tool.description;
  function["parameters"] = tool.input_schema.is_null()
                               ? ojson{{"type", "object"}, {"properties", ojson::object()}}
                               : tool.input_schema;
  return ojson{{"type", "function"}, {"function", std::move(function)}};
}

ojson tool_call_json(const ContentBlock& b) {
  ojson function = ojson::object();
  function["name"] = b.tool_name;
  function["arguments"] = b.input.is_null() ? ojson::object() : b.input;
  return ojson{{"id", b.tool_use_id}, {"type", "function"}, {"function", std::move(function)}};
}

// Builds the messages array; `tool_names` maps tool_use ids to names for tool results.
class MessageWriter {
 public:
  MessageWriter(AssistantTextStore& store, ojson& out) : store_(store), out_(out) {}

  void system(const std::string& text) {
    out_.push_back(ojson{{"role", "system"}, {"content", text}});
  }

  void user(const ChatMessage& m) {
    std::vector<ContentBlock> run;  // consecutive text/image blocks
    auto flush = [&] {
      if (run.empty()) return;
      out_.push_back(ojson{{"role", "user"}, {"content", join_text_blocks(run)}});
      run.clear();
    };
    for (const auto& b : m.blocks) {
      if (b.type == BlockType::ToolResult) {
        flush();
        ojson tool = ojson::object();
        tool["role"] = "tool";
        tool["tool_call_id"] = b.tool_use_id;
        auto it = tool_names_.find(b.tool_use_id);
        tool["name"] = it != tool_names_.end() ? it->second : std::string();
        tool["content"] = b.text;
        out_.push_back(std::move(tool));
      } else if (b.type == BlockType::Text || b.type == BlockType::Image) {
        run.push_back(b);
      }
    }
    flush();
  }

  void assistant(const ChatMessage& m, bool allow_raw) {
    for (const auto& b : m.blocks)
      if (b.type == BlockType::ToolUse) tool_names_[b.tool_use_id] = b.tool_name;
    if (allow_raw) {
      if (auto raw = store_.find(m)) {
        out_.push_back(ojson{{"role", "assistant"}, {"content", std::move(*raw)}});
        return;
      }
    }
    ojson msg = ojson::object();
    msg["role"] = "assistant";
    msg["content"] = join_text_blocks(m.blocks);
    ojson calls = ojson::array();
    for (const auto& b : m.blocks)
      if (b.type == BlockType::ToolUse) calls.push_back(tool_call_json(b));
    if (!calls.empty()) msg["tool_calls"] = std::move(calls);
    out_.push_back(std::move(msg));
  }

 private:
  AssistantTextStore& store_;
  ojson& out_;
  std::map<std::string, std::string> tool_names_;
};

bool has_tool_use(const ChatMessage& m) {
  for (const auto& b : m.blocks)
    if (b.type == BlockType::ToolUse) return true;
  return false;
}

// The text of a final assistant turn that generation should continue ("" when none).
std::string prefill_text(const ChatRequest& normalized) {
  if (normalized.messages.empty()) return "";
  const ChatMessage& last = normalized.messages.back();
  if (last.role != ChatRole::Assistant || has_tool_use(last)) return "";
  return join_text_blocks(last.blocks);
}

// transformers' continue_final_message: cut the rendering right after the final message text.
std::optional<std::string> cut_after_final(const std::string& rendered,
                                           const std::string& final_text) {
  auto pos = rendered.rfind(final_text);
  if (pos != std::string::npos) return rendered.substr(0, pos + final_text.size());
  std::string_view stripped = final_text;
  while (!stripped.empty() && std::isspace(static_cast<unsigned char>(stripped.front())))
    stripped.remove_prefix(1);
  while (!stripped.empty() && std::isspace(static_cast<unsigned char>(stripped.back())))
    stripped.remove_suffix(1);
  if (stripped.empty()) return std::nullopt;
  pos = rendered.rfind(stripped);
  if (pos == std::string::npos) return std::nullopt;
  return rendered.substr(0, pos + stripped.size());
}

bool ends_inside_think(std::string_view text) {
  const auto open = text.rfind("<think>");
  if (open == std::string_view::npos) return false;
  return text.find("</think>", open) == std::string_view::npos;
}

}  // namespace

PromptBuilder::PromptBuilder(const Tokenizer& tokenizer, PromptBuilderOptions options)
    : tokenizer_(&tokenizer),
      options_(std::move(options)),
      template_(ChatTemplate::parse_or_throw(choose_template(tokenizer, options_).source)),
      uses_fallback_(choose_template(tokenizer, options_).fallback),
      store_(options_.raw_text_capacity_bytes) {
  uses_think_ = akv::template_uses_think_tags(template_.source());
  tool_call_format_ =
      uses_fallback_ ? ToolCallFormat::Hermes : detect_tool_call_format(template_.source());
}

ojson PromptBuilder::build_context(const ChatRequest& request) const {
  const ChatRequest normalized = normalize_prompt(request);
  const bool continue_final = !prefill_text(normalized).empty();

  ojson messages = ojson::array();
  MessageWriter writer(store_, messages);
  const std::string system_text = join_text_blocks(normalized.system);
  if (!system_text.empty()) writer.system(system_text);
  for (std::size_t i = 0; i < normalized.messages.size(); ++i) {
    const ChatMessage& m = normalized.messages[i];
    const bool last = i + 1 == normalized.messages.size();
    if (m.role == ChatRole::Assistant) {
      if (last && m.blocks.empty()) continue;  // an empty prefill is no prefill
      writer.assistant(m, /*allow_raw=*/!(last && continue_final));
    } else {
      writer.user(m);
    }
  }

  ojson context = ojson::object();
  context["messages"] = std::move(messages);
  if (!normalized.tools.empty()) {
    ojson tools = ojson::array();
    for (const auto& t : normalized.tools) tools.push_back(tool_json(t));
    context["tools"] = std::move(tools);
  }
  context["add_generation_prompt"] = !continue_final;
  context["bos_token"] = tokenizer_->bos_token();
  context["eos_token"] = tokenizer_->eos_token();
  context["enable_thinking"] = normalized.thinking_enabled;
  if (normalized.template_kwargs.is_object())
    for (const auto& [key, value] : normalized.template_kwargs.items())
      if (key != "messages" && key != "tools") context[key] = value;
  return context;
}

BuiltPrompt PromptBuilder::build(const ChatRequest& request) const {
  const ojson context = build_context(request);
  BuiltPrompt out;
  out.text = template_.render(context, options_.render);
  if (!context["add_generation_prompt"].get<bool>()) {
    const std::string final_text = context["messages"].back()["content"].get<std::string>();
    if (auto cut = cut_after_final(out.text, final_text)) {
      out.text = std::move(*cut);
      out.continues_final_message = true;
    } else {
      throw Error(ErrorKind::InvalidArgument,
                  "the chat template does not render the final assistant message's text");
    }
  }
  out.starts_in_thinking = uses_think_ && ends_inside_think(out.text);
  out.tokens = tokenizer_->encode(out.text, /*add_special_tokens=*/false);
  return out;
}

void PromptBuilder::remember_assistant_output(const ChatMessage& turn, std::string raw_text) const {
  store_.remember(turn, std::move(raw_text));
}

}  // namespace akv
