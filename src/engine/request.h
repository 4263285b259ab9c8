// What callers hand the engine and what it sends back: a tokenized generation request and the
// events of its life (tokens, then exactly one Finished). Plain data; no JSON or HTTP here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kv/retention.h"

namespace akv {

class TokenConstraint;

using RequestId = std::uint64_t;

// Sampling, applied in this order: penalties -> temperature -> top-k -> top-p -> min-p.
struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy (argmax, lowest id on ties)
  std::int32_t top_k = 0;           // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off; drops tokens with p < min_p * p_max
  float repetition_penalty = 1.0f;  // 1: off; over prompt and generated tokens (CTRL / HF rule)
  float presence_penalty = 0.0f;    // over generated tokens (OpenAI rule)
  float frequency_penalty = 0.0f;   // over generated tokens, times their count
  std::optional<std::uint64_t> seed = std::nullopt;  // same seed -> same tokens, batched or not
};

struct GenerateRequest {
  std::vector<std::int32_t> prompt;  // token ids, each in [0, vocab_size), at least one
  std::string ns;                    // prefix-cache namespace: the tenant; never shared across
  std::string agent;                 // agent id ("" anonymous): its last state and stats are kept
  Retention retention = Retention::Normal;  // how hard the KV tiers keep its blocks (retention.h)
  SamplingParams sampling;
  std::vector<std::int32_t> stop_token_ids;  // generation stops after emitting one of these
  std::int32_t max_tokens = 256;             // generated tokens at most (also capped by context)
  std::int32_t n_logprobs = 0;               // top-N alternatives per token (0: none)
  // Optional: limits which tokens may be sampled (a grammar for a forced tool call). Used on
  // the engine thread only, from admission to finish.
  std::shared_ptr<TokenConstraint> constraint;
};

enum class FinishReason { Stop, Length, Cancelled, Error };

struct Usage {
  std::int32_t prompt_tokens = 0;
  std::int32_t cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache
  std::int32_t generated_tokens = 0;
};

struct TokenLogprob {
  std::int32_t id = 0;
  float logprob = 0.0f;
};

enum class EventKind { Started, Token, Error, Finished };

// Started: once, when the request is first admitted; usage has prompt_tokens and cached_tokens
// (the prefix found in the cache), so a client can be told before the first token.
// Token: one generated token. Error: a message, always followed by Finished{Error}.
// Finished: the last event of every request, exactly once.
struct EngineEvent {
  EventKind kind = EventKind::Token;
  RequestId request = 0;
  std::int32_t token = -1;
  // Of `token` under the model's raw distribution (before sampling filters). NaN when the
  // request asked for no logprobs and its token was a plain greedy pick or a plain temperature
  // draw made on the device (only the ids of such steps come back, not the logits).
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;  // n_logprobs most likely, best first
  FinishReason finish_reason = FinishReason::Stop;
  Usage usage;
  std::string error;
};

// Called on the engine thread: keep it short (hand off to a queue) and do not call back into
// the engine from it except cancel(). An exception thrown from it cancels that request.
using EventCallback = std::function<void(const EngineEvent&)>;

}  // namespace akv
