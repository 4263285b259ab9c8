// PromptBuilder: ChatRequest -> Hugging Face template context -> rendered text -> token ids,
// the same way for generation and count_tokens (identical tokens). One per loaded model; it owns
// the parsed chat template and the raw assistant text store. Not the API parsing (server/) and
// not the output side (tool_call_parser.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/assistant_text_store.h"
#include "chat/build_timing.h"
#include "chat/chat_request.h"
#include "chat/chat_template.h"
#include "chat/encode_memo_store.h"
#include "chat/tool_call_format.h"

namespace akv {

class Tokenizer;

// The template used when a model ships none and no --chat-template is given (stories260K):
//   {bos}[System: <system>\n][Tools: <tool JSON per line>\n]User: <text>\nAssistant: <text>\n...
//   Tool: <result>\n ... Assistant:
// (a past assistant text gets one space after "Assistant:" unless it starts with one, so a
// generated " Once upon" re-renders exactly as it was generated).
// Tool calls render as the Hermes <tool_call> form, so the parser and grammar of that family apply.
extern const char* const kFallbackChatTemplate;

struct PromptBuilderOptions {
  std::optional<std::string>
      template_override;  // --chat-template FILE contents; wins over the model's
  std::size_t raw_text_capacity_bytes = std::size_t{64} << 20;
  // Per-conversation memos of encoded segments (chat/encode_memo_store.h); 0: encode all each time.
  std::size_t encode_memo_capacity_bytes = std::size_t{64} << 20;
  ChatRenderOptions render;  // strftime_now clock (tests pin it), limits
};

struct BuiltPrompt {
  std::string text;  // the rendered prompt
  std::vector<std::int32_t> tokens;
  bool continues_final_message =
      false;  // the last turn was an assistant prefill: generation continues it
  bool starts_in_thinking =
      false;  // the prompt ends inside an open <think> (QwQ, R1, Qwen3 prefill)
  BuildTiming timing{};  // where build() spent its time
};

class PromptBuilder {
 public:
  // Uses options.template_override, else the tokenizer's chat template, else
  // kFallbackChatTemplate. Throws Error(BadFormat) when the template does not parse. The
  // tokenizer must outlive the builder.
  PromptBuilder(const Tokenizer& tokenizer, PromptBuilderOptions options = {});

  // The template variables for `request` (normalised first with normalize_prompt):
  //   messages: [{role, content: string}] in transformers form; assistant tool calls as
  //     tool_calls: [{id, type: "function", function: {name, arguments: object}}]; tool results
  //     as {role: "tool", tool_call_id, name, content}; request.system first as a system message;
  //     an assistant turn `owner` remembered (the raw-text store) as {role: "assistant",
  //     content: raw text}; an anonymous owner (no agent id) finds none.
  //   tools: [{type: "function", function: {name, description, parameters}}] (absent when none),
  //   add_generation_prompt, bos_token, eos_token, enable_thinking, reasoning_effort (when the
  //   request gave one), then request.template_kwargs (which win).
  nlohmann::ordered_json build_context(const ChatRequest& request, const TurnOwner& owner = {}) const;

  // Renders and tokenizes (Tokenizer::encode(text, add_special_tokens=false), as transformers'
  // apply_chat_template: the template writes BOS itself). A final assistant turn with text is
  // continued, as transformers' continue_final_message.
  // KV reuse: when the history holds turns `owner` remembered with ids (remember_assistant_output)
  // and the client sent everything up to such a turn's generated text back unchanged, the text
  // up to there is the turn's prompt + generated text exactly as the KV cache holds it (with
  // any part of the generation prompt the template leaves out in history, e.g. Qwen3's empty
  // think block), and the ids start with its prompt ids + generated ids (as sampled, even where
  // they differ from encode()); the rest is encoded. Otherwise plain render + encode. Throws the
  // template's Error
  // (InvalidArgument for raise_exception and runtime errors, ResourceExhausted for limits).
  // Thread-safe; cost: linear in the conversation (render + encode).
  // Earlier turns are found in `owner`'s conversation only (assistant_text_store.h). With
  // `max_tokens`, encoding stops once the ids pass it: then `tokens` holds more than max_tokens
  // ids but not the whole prompt (enough to refuse a prompt longer than the context without
  // encoding all of a huge one).
  // Encoding uses `owner`'s memo (encode_memo_store.h): the segments of the text (between the
  // tokenizer's added tokens) that an earlier build for the same owner encoded are not encoded
  // again; the ids are the same.
  BuiltPrompt build(const ChatRequest& request, const TurnOwner& owner = {},
                    std::size_t max_tokens = SIZE_MAX) const;

  // Call after generating an assistant turn for `owner` (the request's tenant and agent; turns
  // of an anonymous owner are not remembered): `turn` as returned to the client (text, tool_use,
  // thinking blocks), `raw_text` exactly as the model generated it (decoded with special tokens
  // kept, stop token excluded). Only later builds for the same owner find it. Thread-safe.
  void remember_assistant_output(const TurnOwner& owner, const ChatMessage& turn, std::string raw_text) const;
  // Same, with what the KV cache holds: the prompt as built (BuiltPrompt text and tokens) and
  // the generated ids as sampled (stop token excluded; decode(generated_ids) == raw_text), so
  // the next turn's ids can start with prompt_ids + generated_ids. Thread-safe.
  void remember_assistant_output(const TurnOwner& owner, const ChatMessage& turn, std::string raw_text,
                                 std::string prompt_text, std::span<const std::int32_t> prompt_ids,
                                 std::span<const std::int32_t> generated_ids) const;

  ToolCallFormat tool_call_format() const { return tool_call_format_; }
  bool template_uses_think_tags() const { return uses_think_; }
  bool uses_fallback_template() const { return uses_fallback_; }
  const ChatTemplate& chat_template() const { return template_; }
  AssistantTextStore& raw_text_store() const { return store_; }
  const EncodeMemoStore& encode_memos() const { return memos_; }

 private:
  using RememberedTurns = std::vector<std::shared_ptr<const RememberedTurn>>;
  nlohmann::ordered_json build_context(const ChatRequest& request, const TurnOwner& owner,
                                       RememberedTurns* remembered) const;
  // What add_generation_prompt appends to `rendered` (its rendering of `context`); "" if none.
  std::string generation_prompt(const nlohmann::ordered_json& context,
                                std::string_view rendered) const;
  // Sets out.tokens from out.text (rendered), splicing in the remembered turns' ids.
  void splice_remembered_turns(const nlohmann::ordered_json& context, const RememberedTurns& turns,
                               const TurnOwner& owner, std::size_t max_tokens, BuiltPrompt& out) const;
  // Tokenizer::encode_up_to(text, false, max_tokens) with owner's memo.
  std::vector<std::int32_t> encode(const TurnOwner& owner, std::string_view text, std::size_t max_tokens) const;

  const Tokenizer* tokenizer_;
  PromptBuilderOptions options_;
  ChatTemplate template_;
  bool uses_fallback_ = false;
  bool uses_think_ = false;
  bool splices_ids_ = false;  // the tokenizer encodes a text's pieces as the whole text
  ToolCallFormat tool_call_format_ = ToolCallFormat::None;
  mutable AssistantTextStore store_;
  mutable EncodeMemoStore memos_;
};

}  // namespace akv
