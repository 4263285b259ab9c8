// Anthropic Messages request JSON -> ChatRequest (api-notes §1.2). Unknown fields, betas and
// block types are accepted and ignored; a missing or mistyped field the server needs throws
// Error{InvalidArgument} naming its path, which becomes a 400 invalid_request_error.
#pragma once

#include <nlohmann/json.hpp>

#include "chat/chat_request.h"

namespace akv {

// POST /v1/messages. max_tokens is required (0 allowed).
ChatRequest parse_anthropic_messages(const nlohmann::ordered_json& body);
// POST /v1/messages/count_tokens: the same body without max_tokens.
ChatRequest parse_anthropic_count_tokens(const nlohmann::ordered_json& body);
// `thinking.display` is "omitted": the reply leaves reasoning out (api-notes §6).
bool thinking_display_omitted(const nlohmann::ordered_json& body);

}  // namespace akv
