// The part of a chat request both dialects share after parsing: render and tokenize the
// prompt, fit max_tokens into the context, and assemble the engine request and output
// pipeline (stop sequences, tool-call parser). Also the one-line request log.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "chat/chat_request.h"
#include "server/generation.h"
#include "server/request_identity.h"
#include "server/serving.h"

namespace akv {

struct PreparedChat {
  GenerationJob job;
  std::int64_t prompt_tokens = 0;
  bool prewarm_only = false;  // max_tokens 0: fill the cache, generate nothing
};

// Throws Error{InvalidArgument} when the prompt leaves no room in the context, with Anthropic's
// wording: "input length and `max_tokens` exceed context limit: A + B > C".
// A max_tokens of 0 in the request means "up to the context" for OpenAI and pre-warm for
// Anthropic (`anthropic_zero_is_prewarm`). Earlier turns are found, and the reply is remembered,
// in `who`'s conversation only (tenant and agent; none without an agent id: TurnOwner).
PreparedChat prepare_chat(ServingContext& ctx, const ChatRequest& chat, const RequestIdentity& who,
                          bool anthropic_zero_is_prewarm);

// The number of prompt tokens count_tokens reports: identical to what generation prefills for
// the same body and identity.
std::int64_t count_prompt_tokens(ServingContext& ctx, const ChatRequest& chat, const RequestIdentity& who);

// The engine's sampling parameters for a request's options (both dialects, chat and legacy).
SamplingParams sampling_params(const SamplingOptions& options);

// One line per finished request (never the prompt text).
void log_request(const std::string& route, const std::string& agent, const ReplyFinish& finish);

}  // namespace akv
