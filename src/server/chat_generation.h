// The part of a chat request both dialects share after parsing: render and tokenize the
// prompt, fit max_tokens into the context, and assemble the engine request and output
// pipeline (stop sequences, tool-call parser). Also the one-line request log.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "chat/chat_request.h"
#include "server/api_error.h"
#include "server/generation.h"
#include "server/request_identity.h"
#include "server/serving.h"
#include "server/tool_output_parser.h"

namespace akv {

struct PreparedChat {
  GenerationJob job;
  std::int64_t prompt_tokens = 0;
  bool prewarm_only = false;  // max_tokens 0: fill the cache, generate nothing
};

// Throws Error{InvalidArgument} when the prompt leaves no room in the context, with Anthropic's
// wording: "input length and `max_tokens` exceed context limit: A + B > C". Encoding stops
// once the prompt cannot fit, so then A is the count reached (more than C), not the whole.
// A max_tokens of 0 in the request means "up to the context" for OpenAI and pre-warm for
// Anthropic. Tool calls get ids of the dialect (new_tool_call_id). Earlier turns are found, and
// the reply is remembered, in `who`'s conversation only (tenant and agent; none without an
// agent id: TurnOwner).
// Template limits (render_limits.h, value depth) are the request's fault: InvalidArgument too.
PreparedChat prepare_chat(ServingContext& ctx, const ChatRequest& chat, const RequestIdentity& who,
                          Dialect dialect);

// A fresh id for a tool call the model makes: "toolu_01..." (Anthropic), "call_..." (OpenAI).
std::string new_tool_call_id(Dialect dialect);

// The reply's output parser (tool calls, reasoning) as prepare_chat makes it: `options` with
// call ids from new_tool_call_id(dialect).
std::unique_ptr<OutputParser> make_chat_output_parser(Dialect dialect, ToolCallParserOptions options);

// The parser for a model whose template writes calls in `model_format`: Harmony always (its
// channels are in every reply; calls only when `chat` allows them), QwenXml when `chat` allows
// calls, else ToolCallParser with the format (None when no call is allowed).
std::unique_ptr<OutputParser> make_model_output_parser(Dialect dialect, ToolCallFormat model_format, const ChatRequest& chat,
                                                       bool parse_thinking, bool starts_in_thinking);

// The number of prompt tokens count_tokens reports: identical to what generation prefills for
// the same body and identity.
std::int64_t count_prompt_tokens(ServingContext& ctx, const ChatRequest& chat, const RequestIdentity& who);

// The engine's sampling parameters for a request's options (both dialects, chat and legacy).
SamplingParams sampling_params(const SamplingOptions& options);

// One line per finished request (never the prompt text).
void log_request(const std::string& route, const std::string& agent, const ReplyFinish& finish);

// A GenerationJob::on_finish that observes the TTFT histogram (ctx.ttft) and records the turn
// in ctx.history (the dashboard's TTFT history) for `who`'s tenant and agent (an anonymous
// request only in the histogram). Cancelled and failed requests are not counted.
std::function<void(const ReplyFinish&)> record_turn_for(ServingContext& ctx, const RequestIdentity& who);

}  // namespace akv
