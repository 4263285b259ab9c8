// Earlier assistant turns for a harmony template (GPT-OSS): the `messages` entries its template
// expects, and the check that lets the prompt builder put back the exact text a turn was
// generated as. What the template does with them (openai-gpt-oss-120b.jinja): `thinking` of a
// turn with tool_calls renders as its analysis message unless a later assistant turn without
// tool_calls (a final answer) follows, and `content` renders as the final message (analysis of
// a final answer is always dropped); it reads only tool_calls[0].
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chat/assistant_text_store.h"
#include "chat/chat_request.h"

namespace akv {

// Appends `turn` to `messages`: without calls {role: "assistant", content: text[, thinking]};
// with calls one message per call (the template reads only the first), each
// {role, content: "", tool_calls: [call]}, the first with `thinking` (or, without thinking, the
// turn's text as content, which the template renders as analysis). Text of a turn that has both
// thinking and calls is left out (the template refuses content and thinking together).
// `thinking` is set only when non-empty (the template renders even an empty one).
void append_harmony_assistant(const ChatMessage& turn, nlohmann::ordered_json& messages);

// The turn the model wrote as `raw` (generated after "<|start|>assistant", end token excluded):
// analysis -> Thinking, final and commentary without recipient -> Text, each call -> ToolUse
// (ids empty). nullopt when `raw` does not parse as harmony or a call's arguments are not a JSON
// object.
std::optional<ChatMessage> harmony_turn_from_raw(std::string_view raw);

// Where the remembered `turn` sits in `text` (the new prompt as the template rendered it):
// text starts with turn.prompt_text (which ends in "<|start|>assistant"), and the assistant
// messages rendered from there say what turn.raw_text says (same channels and recipients, equal
// text, JSON-equal arguments). Returns the offset where the rest of `text` continues (the last
// rendered message's end marker), so that prompt_text + raw_text + text[offset:] is the prompt
// with the turn as generated. nullopt otherwise (e.g. the template dropped its analysis after a
// final answer: then the rendering stands, and the KV prefix ends at prompt_text).
std::optional<std::size_t> harmony_turn_rest(std::string_view text, std::size_t from, const RememberedTurn& turn);

}  // namespace akv
