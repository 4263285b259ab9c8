// Prompt normalisation (architecture §6): the deterministic rewrite of a ChatRequest that makes
// the same conversation render to the same tokens on every turn, whichever dialect and client
// quirks it arrived with. Pure functions; no template or tokenizer knowledge here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_request.h"

namespace akv {

// Claude Code's per-request attribution block; its nonce would defeat prefix caching.
inline constexpr std::string_view kBillingHeaderPrefix = "x-anthropic-billing-header:";

// Returns the normalised copy of `request`. Rules, applied in this order:
//  1. Leading system blocks whose text starts with kBillingHeaderPrefix are dropped.
//  2. Tool-role messages (OpenAI) become user messages holding their ToolResult blocks, so both
//     dialects describe a tool round trip the same way.
//  3. A system-role message inside messages[] becomes one text block
//     "<system-reminder>\n" + its text + "\n</system-reminder>" appended to the preceding user
//     turn; with no user turn right before it (first message, or after an assistant turn) it
//     starts a new user turn. Empty system messages vanish.
//  4. Thinking blocks are dropped from every assistant turn: a past turn's reasoning is never
//     re-rendered from blocks (the model's own text, thinking included, comes back through the
//     raw-text store instead, and the template decides what of it to keep). With
//     `keep_thinking` (harmony templates, which take reasoning in a `thinking` field and decide
//     themselves what to keep) they stay.
//  5. Messages left with no blocks are dropped (except a final assistant turn, a prefill).
//  6. Consecutive turns of the same role are merged (blocks concatenated in order).
// content_was_string is cleared: a string and a one-text-block list are the same from here on.
ChatRequest normalize_prompt(const ChatRequest& request, bool keep_thinking = false);

// The text of a turn as templates see it: the non-empty Text (and Image placeholder) blocks
// joined with "\n\n". One block renders as exactly its text; Thinking, ToolUse and ToolResult
// blocks are skipped.
std::string join_text_blocks(const std::vector<ContentBlock>& blocks);

// "<system-reminder>\n" + text + "\n</system-reminder>"
std::string wrap_system_reminder(std::string_view text);

}  // namespace akv
