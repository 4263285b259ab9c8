#include "chat/prompt_builder.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <utility>

#include "base/error.h"
#include "base/phase_clock.h"
#include "chat/harmony_history.h"
#include "chat/prompt_normalizer.h"
#include "tokenizer/tokenizer.h"

namespace akv {

using ojson = nlohmann::ordered_json;
using RememberedTurns = std::vector<std::shared_ptr<const RememberedTurn>>;

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
  // Remembered turns that carry ids are appended to `remembered` (when not null), in order.
  // `harmony`: assistant turns take the harmony template's form (harmony_history.h).
  MessageWriter(AssistantTextStore& store, const TurnOwner& owner, ojson& out, RememberedTurns* remembered,
                bool harmony)
      : store_(store), owner_(owner), out_(out), remembered_(remembered), harmony_(harmony) {}

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
      if (auto found = store_.find_turn(owner_, m)) {
        if (harmony_) {  // the template takes the turn apart (it refuses channel markers in content)
          const std::optional<ChatMessage> raw_turn = harmony_turn_from_raw(found->raw_text);
          append_harmony_assistant(raw_turn ? *raw_turn : m, out_);
        } else {
          out_.push_back(ojson{{"role", "assistant"}, {"content", found->raw_text}});
        }
        if (remembered_ && found->has_ids()) remembered_->push_back(std::move(found));
        return;
      }
    }
    if (harmony_) {
      append_harmony_assistant(m, out_);
      return;
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
  const TurnOwner& owner_;
  ojson& out_;
  RememberedTurns* remembered_;
  const bool harmony_;
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

std::size_t common_prefix_length(std::string_view a, std::string_view b) {
  const std::size_t n = std::min(a.size(), b.size());
  std::size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// Where `turn`'s generated text starts in `text` when everything before it is what the KV cache
// held before generating it: text[0:pos] == turn.prompt_text[0:pos], text[pos:] starts with
// raw_text, and the part of the prompt that is skipped (turn.prompt_text[pos:]) is empty or a
// suffix of the generation prompt that the template leaves out when it re-renders the turn in
// history (Qwen3's empty think block). `from`: the turn starts at or after it. nullopt when the
// client changed the conversation (or the template renders it differently).
std::optional<std::size_t> find_generated_text(std::string_view text, std::size_t from,
                                               const RememberedTurn& turn,
                                               std::string_view generation_prompt) {
  const std::string_view prompt = turn.prompt_text;
  const std::size_t common = common_prefix_length(text, prompt);
  auto generated_at = [&](std::size_t pos) {
    return pos >= from && pos <= common && text.substr(pos).starts_with(turn.raw_text);
  };
  if (common == prompt.size() && generated_at(common)) return common;
  if (generation_prompt.empty() || !prompt.ends_with(generation_prompt)) return std::nullopt;
  for (std::size_t n_skipped = 1; n_skipped <= generation_prompt.size(); ++n_skipped)
    if (generated_at(prompt.size() - n_skipped)) return prompt.size() - n_skipped;
  return std::nullopt;
}

// Whether encode(a + b) == encode(a) + encode(b) at a word boundary: false for tokenizers that
// add a prefix space to every input (SentencePiece "prepend"), whose ids cannot be spliced.
bool encodes_pieces_independently(const Tokenizer& tokenizer) {
  auto joined = tokenizer.encode("Hi there", false);
  auto head = tokenizer.encode("Hi", false);
  const auto tail = tokenizer.encode(" there", false);
  head.insert(head.end(), tail.begin(), tail.end());
  return joined == head;
}

}  // namespace

PromptBuilder::PromptBuilder(const Tokenizer& tokenizer, PromptBuilderOptions options)
    : tokenizer_(&tokenizer),
      options_(std::move(options)),
      template_(ChatTemplate::parse_or_throw(choose_template(tokenizer, options_).source)),
      uses_fallback_(choose_template(tokenizer, options_).fallback),
      store_(options_.raw_text_capacity_bytes),
      memos_(options_.encode_memo_capacity_bytes) {
  uses_think_ = akv::template_uses_think_tags(template_.source());
  tool_call_format_ =
      uses_fallback_ ? ToolCallFormat::Hermes : detect_tool_call_format(template_.source());
  splices_ids_ = encodes_pieces_independently(tokenizer);
}

ojson PromptBuilder::build_context(const ChatRequest& request, const TurnOwner& owner) const {
  return build_context(request, owner, nullptr);
}

ojson PromptBuilder::build_context(const ChatRequest& request, const TurnOwner& owner,
                                   RememberedTurns* remembered) const {
  const bool harmony = tool_call_format_ == ToolCallFormat::Harmony;
  const ChatRequest normalized = normalize_prompt(request, /*keep_thinking=*/harmony);
  const bool continue_final = !prefill_text(normalized).empty();

  ojson messages = ojson::array();
  MessageWriter writer(store_, owner, messages, remembered, harmony);
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
  if (!normalized.reasoning_effort.empty()) context["reasoning_effort"] = normalized.reasoning_effort;
  if (normalized.template_kwargs.is_object())
    for (const auto& [key, value] : normalized.template_kwargs.items())
      if (key != "messages" && key != "tools") context[key] = value;
  return context;
}

BuiltPrompt PromptBuilder::build(const ChatRequest& request, const TurnOwner& owner,
                                 std::size_t max_tokens) const {
  PhaseClock clock;
  RememberedTurns remembered;
  const ojson context = build_context(request, owner, splices_ids_ ? &remembered : nullptr);
  BuiltPrompt out;
  out.timing.context_ms = clock.lap_ms();
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
  out.timing.render_ms = clock.lap_ms();
  splice_remembered_turns(context, remembered, owner, max_tokens, out);
  out.starts_in_thinking = uses_think_ && ends_inside_think(out.text);
  return out;
}

std::string PromptBuilder::generation_prompt(const ojson& context,
                                             std::string_view rendered) const {
  if (!context["add_generation_prompt"].get<bool>()) return "";
  ojson without = context;
  without["add_generation_prompt"] = false;
  std::string text;
  try {
    text = template_.render(without, options_.render);
  } catch (const Error&) {
    return "";
  }
  if (!rendered.starts_with(text)) return "";
  return std::string(rendered.substr(text.size()));
}

std::vector<std::int32_t> PromptBuilder::encode(const TurnOwner& owner, std::string_view text,
                                                std::size_t max_tokens) const {
  return memos_.encode(owner, [&](EncodeMemo* memo) {
    return tokenizer_->encode_up_to(text, /*add_special_tokens=*/false, max_tokens, memo);
  });
}

void PromptBuilder::splice_remembered_turns(const ojson& context, const RememberedTurns& turns,
                                            const TurnOwner& owner, std::size_t max_tokens,
                                            BuiltPrompt& out) const {
  // Phase 1: replace each remembered turn, oldest first, by the exact text the KV cache holds
  // for it (its prompt, the skipped part of the generation prompt included, + generated text).
  // Harmony turns are found by what their messages say (harmony_history.h), since the template
  // writes a call's header and arguments its own way.
  PhaseClock clock;
  const std::string rendered = out.text;
  std::optional<std::string> gen_prompt;  // rendered on first need
  const RememberedTurn* last = nullptr;
  std::size_t kv_end = 0;  // out.text[0:kv_end] is last->prompt_text + last->raw_text
  for (const auto& turn : turns) {
    std::optional<std::size_t> rest;  // where out.text continues after the turn's generated text
    if (tool_call_format_ == ToolCallFormat::Harmony) {
      rest = harmony_turn_rest(out.text, kv_end, *turn);
    } else {
      std::optional<std::size_t> pos = find_generated_text(out.text, kv_end, *turn, "");
      if (!pos) {
        if (!gen_prompt) {
          clock.lap_into(out.timing.splice_ms);
          gen_prompt = generation_prompt(context, rendered);
          clock.lap_into(out.timing.render_ms);
        }
        pos = find_generated_text(out.text, kv_end, *turn, *gen_prompt);
      }
      if (pos) rest = *pos + turn->raw_text.size();
    }
    if (!rest) continue;
    out.text = turn->prompt_text + turn->raw_text + out.text.substr(*rest);
    kv_end = turn->prompt_text.size() + turn->raw_text.size();
    last = turn.get();
  }
  // Phase 2: the ids the KV cache holds for that text, then the rest encoded.
  clock.lap_into(out.timing.splice_ms);
  if (!last) {
    out.tokens = encode(owner, out.text, max_tokens);
    clock.lap_into(out.timing.encode_ms);
    return;
  }
  const std::size_t n_head = last->prompt_ids.size() + last->generated_ids.size();
  const auto tail = encode(owner, std::string_view(out.text).substr(kv_end), max_tokens - std::min(max_tokens, n_head));
  out.tokens = last->prompt_ids;
  out.tokens.reserve(out.tokens.size() + last->generated_ids.size() + tail.size());
  out.tokens.insert(out.tokens.end(), last->generated_ids.begin(), last->generated_ids.end());
  out.tokens.insert(out.tokens.end(), tail.begin(), tail.end());
  clock.lap_into(out.timing.encode_ms);
}

void PromptBuilder::remember_assistant_output(const TurnOwner& owner, const ChatMessage& turn,
                                              std::string raw_text) const {
  store_.remember(owner, turn, std::move(raw_text));
}

void PromptBuilder::remember_assistant_output(const TurnOwner& owner, const ChatMessage& turn,
                                              std::string raw_text,
                                              std::string prompt_text,
                                              std::span<const std::int32_t> prompt_ids,
                                              std::span<const std::int32_t> generated_ids) const {
  if (!splices_ids_ || prompt_ids.empty()) {
    store_.remember(owner, turn, std::move(raw_text));
    return;
  }
  store_.remember(owner, turn,
                  RememberedTurn{.raw_text = std::move(raw_text),
                                 .prompt_text = std::move(prompt_text),
                                 .prompt_ids = {prompt_ids.begin(), prompt_ids.end()},
                                 .generated_ids = {generated_ids.begin(), generated_ids.end()}});
}

}  // namespace akv
