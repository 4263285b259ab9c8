// Anthropic Messages request JSON -> ChatRequest (api-notes §1.2). Unknown fields, betas and
// block types are accepted and ignored; a missing or mistyped field the server needs throws
// Error{InvalidArgument} naming its path, which becomes a 400 invalid_request_error.
#pragma once

#include <cstddef>

#include <nlohmann/json.hpp>

#include "chat/chat_request.h"

namespace akv {

// Bounds on stop_sequences (each is matched against every generated token).
inline constexpr std::size_t kMaxStopSequences = 64;

// POST /v1/messages. max_tokens is required (0 allowed: fill the prefix cache, api-notes §1.2).
// Also rejected (400): no messages, empty content except in a final assistant message, a
// custom tool without input_schema or with an empty name, `thinking`/`metadata` not objects,
// stop_sequences not a list or past kMaxStopSequences / fields::kMaxStopSequenceBytes.
// temperature, top_p and top_k left out take `defaults` (the server's: the API's or the model's
// generation_config.json, chat/generation_config.h), as do min_p and the penalties, which the
// Messages API does not have.
ChatRequest parse_anthropic_messages(const nlohmann::ordered_json& body, const SamplingOptions& defaults = {});
// POST /v1/messages/count_tokens: the same body without max_tokens.
ChatRequest parse_anthropic_count_tokens(const nlohmann::ordered_json& body);
// `thinking.display` is "omitted": the reply leaves reasoning out (api-notes §6).
bool thinking_display_omitted(const nlohmann::ordered_json& body);

}  // namespace akv
