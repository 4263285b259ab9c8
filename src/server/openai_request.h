// OpenAI request JSON -> ChatRequest: POST /v1/chat/completions (api-notes §2) and the legacy
// POST /v1/completions (a raw prompt). Unknown fields are accepted and ignored; a missing or
// mistyped field throws Error{InvalidArgument} naming its path (400).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_request.h"

namespace akv {

struct OpenAiChatRequest {
  ChatRequest chat;
  bool include_usage = false;  // stream_options.include_usage
};

// Also rejected (400): `logprobs` true / `top_logprobs` above 0 (log probabilities are not
// returned), top_logprobs outside 0..20, `user` not a string, stream_options.include_usage not
// a boolean, more than 16 stop strings or one past kMaxStopSequenceBytes (json_fields.h).
// Sampling fields the body leaves out take `defaults` (the server's: the API's or the model's
// generation_config.json, chat/generation_config.h).
OpenAiChatRequest parse_openai_chat(const nlohmann::ordered_json& body, const SamplingOptions& defaults = {});

// /v1/completions: the prompt is text or token ids (no chat template).
struct OpenAiCompletionRequest {
  std::string model;
  std::string prompt_text;
  std::vector<std::int32_t> prompt_ids;  // used when the client sent ids
  bool prompt_is_ids = false;
  bool echo = false;
  bool include_usage = false;
  ChatRequest options;  // max_tokens, stop, sampling, stream (messages unused)
};

// Token ids outside int32 are rejected here; ids outside the model's vocabulary by
// check_prompt_ids, which the route calls with the vocabulary size.
OpenAiCompletionRequest parse_openai_completion(const nlohmann::ordered_json& body,
                                                const SamplingOptions& defaults = {});

// Throws Error{InvalidArgument} naming prompt.<i> for an id outside [0, vocab_size).
void check_prompt_ids(const std::vector<std::int32_t>& ids, std::int32_t vocab_size);

}  // namespace akv
